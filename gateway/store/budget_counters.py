"""Tenants' spend per window (docs/design.md §13): a UTC day and a UTC month, each a counter
of tokens and nano-USD in the store, shared by every replica.

A window's counter is named by its period (``day:2026-11-24``, ``month:2026-11``), so
a new period starts at zero by itself; the old counter expires a day after its period
ends. The clock is injected: tests move it across a boundary.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Literal

from gateway.store.base import Granted, Spend, Store, Window
from gateway.store.keys import Keys
from tool_registry import immutable

WindowName = Literal["day", "month"]
WINDOWS: tuple[WindowName, ...] = ("day", "month")
_KEPT_AFTER_S = 86400.0  # an ended period's counter stays readable this long


@immutable
class Period:
    window: WindowName
    label: str  # 2026-11-24, 2026-11
    resets_at: float  # epoch seconds: when the next period starts


def period(window: WindowName, now: float) -> Period:
    moment = datetime.fromtimestamp(now, UTC)
    if window == "day":
        start = moment.replace(hour=0, minute=0, second=0, microsecond=0)
        return Period(window, start.strftime("%Y-%m-%d"), (start + timedelta(days=1)).timestamp())
    start = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    following = (start + timedelta(days=32)).replace(day=1)
    return Period(window, start.strftime("%Y-%m"), following.timestamp())


@immutable
class TenantWindow:
    """One of a tenant's windows now: its period, and its counter and limits."""

    period: Period
    window: Window

    @property
    def limited(self) -> bool:
        return self.window.tokens is not None or self.window.nanos is not None


Limits = tuple[int | None, int | None]  # a window's tokens and nano-USD (None: unlimited)


class BudgetStore:
    """The counters of tenants' windows, read and changed in one store call each."""

    def __init__(self, store: Store, keys: Keys, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._keys = keys
        self.clock = clock
        # The periods of the current UTC day (valid from, until), and the counters' keys
        # in them: worked out once a day, not for every request.
        self._today: tuple[float, float, dict[WindowName, Period]] = (0.0, 0.0, {})
        self._names: dict[tuple[str, WindowName], str] = {}

    def _periods(self, now: float) -> dict[WindowName, Period]:
        start, end, periods = self._today
        if not start <= now < end:
            periods = {name: period(name, now) for name in WINDOWS}
            end = periods["day"].resets_at
            self._today = (end - 86400.0, end, periods)
            self._names = {}
        return periods

    def windows(self, tenant: str, limits: dict[WindowName, Limits]) -> list[TenantWindow]:
        """The tenant's windows as of now (``limits`` names them)."""
        now = self.clock()
        periods = self._periods(now)
        found = []
        for name, (tokens, nanos) in limits.items():
            current = periods[name]
            key = self._names.get((tenant, name))
            if key is None:
                key = self._names[tenant, name] = self._keys.budget(tenant, name, current.label)
            ttl = current.resets_at - now + _KEPT_AFTER_S
            found.append(TenantWindow(current, Window(key, tokens, nanos, ttl)))
        return found

    async def spend(self, windows: list[TenantWindow], spend: Spend) -> Granted:
        return await self._store.spend([w.window for w in windows], spend)

    async def used(self, windows: list[TenantWindow]) -> list[tuple[int, int]]:
        """Each window's tokens and nano-USD so far (reservations in flight included)."""
        return await self._store.counters([w.window.key for w in windows])
