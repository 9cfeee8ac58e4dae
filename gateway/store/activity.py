"""What each tenant did, minute by minute, over the last hour (docs/design.md §19): requests,
errors, tool calls, spend and time taken — the console's Overview draws them, without
Prometheus.

While the console is on, a replica counts in its own memory as requests end (a dict
update, no store call on a request's path) and adds what it counted to the store every few seconds
(``flush``), into one hash per tenant and hour, so the Overview of any replica sums
every replica's. What a replica has not yet added is read beside the store's
(``last_hour``), so its own requests show at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field

from gateway.digits import whole
from gateway.store import GuardedStore, Keys, StoreUnavailable
from tool_registry import immutable

logger = logging.getLogger("gateway.activity")

MEASURES = ("requests", "errors", "tool_calls", "cost_nanos", "latency_ms")
MINUTES = 60
KEPT_S = 2 * 3600.0  # an hour's hash, after its last addition
FLUSH_S = 5.0  # a replica adds its counts this often

Counts = list[int]  # by MEASURES


@immutable
class Minute:
    at: int  # the minute, counted from the epoch
    requests: int = 0
    errors: int = 0
    tool_calls: int = 0
    cost_nanos: int = 0
    latency_ms: int = 0  # summed over its requests (their mean: over ``requests``)


@dataclass(slots=True)
class Activity:
    """A replica's counts not yet added to the store, by tenant and minute."""

    clock: Callable[[], float] = time.time
    _pending: dict[tuple[str, int], Counts] = field(default_factory=dict)

    def count(
        self,
        tenant: str,
        status: int,
        tool_calls: int,
        cost_nanos: int | None,
        latency_ms: float = 0.0,
    ) -> None:
        minute = int(self.clock() // 60)
        counts = self._pending.get((tenant, minute))
        if counts is None:
            counts = self._pending[tenant, minute] = [0] * len(MEASURES)
        counts[0] += 1
        counts[1] += status >= 400
        counts[2] += tool_calls
        counts[3] += cost_nanos or 0
        counts[4] += round(latency_ms)

    def pending(self) -> dict[tuple[str, int], Counts]:
        return self._pending

    def take(self) -> dict[tuple[str, int], Counts]:
        taken, self._pending = self._pending, {}
        return taken

    def put_back(self, taken: dict[tuple[str, int], Counts]) -> None:
        """Counts the store did not take: added again at the next flush."""
        for key, counts in taken.items():
            mine = self._pending.setdefault(key, [0] * len(MEASURES))
            for i, n in enumerate(counts):
                mine[i] += n


class ActivityStore:
    def __init__(self, store: GuardedStore, keys: Keys, activity: Activity) -> None:
        self._store = store
        self._keys = keys
        self.activity = activity

    async def flush(self) -> None:
        """Add this replica's counts to the store; kept for the next flush if it does
        not answer."""
        taken = self.activity.take()
        by_hour: dict[tuple[str, int], dict[str, int]] = defaultdict(dict)
        for (tenant, minute), counts in taken.items():
            fields = by_hour[tenant, minute // 60]
            for name, n in zip(MEASURES, counts, strict=True):
                if n:
                    fields[f"{minute % 60}:{name}"] = n
        try:
            for (tenant, hour), fields in by_hour.items():
                await self._store.field_add(self._keys.activity(tenant, hour), fields, KEPT_S)
        except StoreUnavailable:
            self.activity.put_back(taken)
            logger.warning("activity counts kept for later: store unavailable")

    async def last_hour(self, tenants: Iterable[str], now: float) -> dict[str, list[Minute]]:
        """Each tenant's last ``MINUTES`` minutes, oldest first (the store's and this
        replica's own not yet added)."""
        last = int(now // 60)
        first = last - MINUTES + 1
        found: dict[str, list[Minute]] = {}
        pending = self.activity.pending()
        for tenant in tenants:
            sums: dict[int, Counts] = {}
            for hour in sorted({first // 60, last // 60}):
                for name, raw in (
                    await self._store.fields(self._keys.activity(tenant, hour))
                ).items():
                    minute_text, _, measure = name.partition(":")
                    of_hour = whole(minute_text, max_digits=2)
                    if of_hour is None or measure not in MEASURES:
                        continue
                    minute = hour * 60 + of_hour
                    if first <= minute <= last:
                        counts = sums.setdefault(minute, [0] * len(MEASURES))
                        counts[MEASURES.index(measure)] += _int(raw)
            for (named, minute), counts in pending.items():
                if named == tenant and first <= minute <= last:
                    mine = sums.setdefault(minute, [0] * len(MEASURES))
                    for i, n in enumerate(counts):
                        mine[i] += n
            nothing = [0] * len(MEASURES)
            found[tenant] = [Minute(m, *sums.get(m, nothing)) for m in range(first, last + 1)]
        return found


@contextlib.asynccontextmanager
async def flushing(
    activity: ActivityStore, wanted: Callable[[], bool], every_s: float = FLUSH_S
) -> AsyncIterator[None]:
    """While the block runs, this replica's counts go to the store every ``every_s``
    (and once more at its end) while ``wanted`` (the console is on); dropped if not."""

    async def flush() -> None:
        if wanted():
            await activity.flush()
        else:
            activity.activity.take()

    async def run() -> None:
        while True:
            await asyncio.sleep(every_s)
            await flush()

    task = asyncio.create_task(run(), name="activity flush")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        with contextlib.suppress(StoreUnavailable):
            await flush()


def _int(raw: bytes) -> int:
    try:
        return int(raw)
    except ValueError:
        return 0
