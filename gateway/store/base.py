"""The store interface and the rate-limit algorithm both backends share."""

from __future__ import annotations

import math
from typing import Literal, Protocol

from tool_registry import immutable

RateMode = Literal["acquire", "charge", "peek"]


async def settled_now() -> None:
    """Nothing to wait for before a read: a store read with no writes after answers
    (its ``settled`` default; the gateway passes ``Afterwards.settled``)."""


@immutable
class RateDecision:
    allowed: bool
    limit: int
    remaining: int
    reset_s: float  # until the whole limit is available again
    retry_after_s: float  # when refused: until the request would fit


SLACK_MS = 0.001


def gcra(
    tat_ms: float | None, now_ms: float, limit: int, period_ms: float, cost: int, mode: RateMode
) -> tuple[RateDecision, float | None]:
    """The generic cell rate algorithm: one decision and the state to store (pure).

    ``tat_ms`` is the stored "theoretical arrival time"; the burst allowance is the
    whole ``limit`` per ``period``. ``acquire`` takes ``cost`` if it fits, ``charge``
    takes it regardless (usage counted after the fact), ``peek`` only asks whether one
    more unit fits. Returns the new TAT to store, or None to leave it. The Redis
    backend runs the same steps in one Lua script.
    """
    interval = period_ms / limit
    tat = max(tat_ms if tat_ms is not None else now_ms, now_ms)
    new_tat = tat + cost * interval
    # Clock readings in milliseconds are large floats: a first request at an exact
    # fit can come out a rounding error over (60000.0000002), so a microsecond of
    # slack, in the Lua script too.
    allowed = mode == "charge" or new_tat - now_ms <= period_ms + SLACK_MS
    store = new_tat if allowed and mode != "peek" else None
    after = store if store is not None else tat
    remaining = max(0, math.floor((period_ms - (after - now_ms)) / interval))
    retry_after = 0.0 if allowed else (new_tat - period_ms - now_ms) / 1000
    decision = RateDecision(allowed, limit, remaining, (after - now_ms) / 1000, retry_after)
    return decision, store


@immutable
class Window:
    """A spend counter (tokens and nano-USD under one key) and its limits (None: not
    limited); a new counter lives ``ttl_s``."""

    key: str
    tokens: int | None
    nanos: int | None
    ttl_s: float


@immutable
class Spend:
    """One change to every window's counters, at once: first ``settle`` what an earlier
    reservation turned out to cost (negative: a refund), then reserve ``tokens`` and
    ``nanos`` and as many output tokens as fit, up to ``max_out``, at ``out_pico``
    pico-USD each. Fewer than ``min_out`` fit: nothing is reserved (the settling still
    happens). A spend that reserves nothing is always allowed."""

    settle_tokens: int = 0
    settle_nanos: int = 0
    tokens: int = 0
    nanos: int = 0
    out_pico: int = 0
    max_out: int = 0
    min_out: int = 0

    @property
    def reserves(self) -> bool:
        return bool(self.tokens or self.nanos or self.max_out)


@immutable
class Granted:
    """What a spend got: whether it was reserved, how many output tokens, each
    window's counters after it, and the first window that refused it (-1: none)."""

    allowed: bool
    out: int
    used: tuple[tuple[int, int], ...]
    refused_by: int = -1


def out_nanos(out: int, out_pico: int) -> int:
    """The nano-USD ``out`` output tokens cost, rounded up."""
    return -(-out * out_pico // 1000)


def spend_counters(
    counters: list[tuple[int, int]], windows: list[Window], spend: Spend
) -> tuple[Granted, list[tuple[int, int]]]:
    """A spend on counters (pure): the grant and the counters to store. The Redis
    backend runs the same steps in one Lua script."""
    settled = [(t + spend.settle_tokens, n + spend.settle_nanos) for t, n in counters]
    out, refused = spend.max_out, -1
    for index, (window, (t, n)) in enumerate(zip(windows, settled, strict=True)):
        fits = out
        if window.tokens is not None:
            fits = min(fits, window.tokens - t - spend.tokens)
        if window.nanos is not None:
            room = window.nanos - n - spend.nanos
            if spend.out_pico > 0:
                fits = min(fits, room * 1000 // spend.out_pico)
            elif room < 0:
                fits = -1
        if fits < out:
            out = fits
            if out < spend.min_out and refused < 0:
                refused = index
    allowed = not spend.reserves or out >= spend.min_out
    if not allowed:
        return Granted(False, 0, tuple(settled), refused), settled
    out = max(out, 0) if spend.reserves else 0
    cost = spend.nanos + out_nanos(out, spend.out_pico)
    after = [(t + spend.tokens + out, n + cost) for t, n in settled]
    return Granted(True, out, tuple(after)), after


class Store(Protocol):
    """What the gateway keeps outside its process. Keys come from ``Keys``."""

    async def rate(
        self, key: str, limit: int, period_s: float, cost: int, mode: RateMode
    ) -> RateDecision: ...

    async def get(self, key: str) -> bytes | None: ...

    async def get_many(self, keys: list[str]) -> list[bytes | None]: ...

    async def put(self, key: str, value: bytes, ttl_s: float) -> None: ...

    async def delete(self, keys: list[str]) -> None: ...

    async def take(self, key: str) -> bytes | None: ...  # get and delete, at once

    async def put_new(self, key: str, value: bytes, ttl_s: float) -> bool: ...  # only if absent

    async def delete_if(self, key: str, value: bytes) -> bool: ...  # only while it holds value

    # A small map under one key (one hash slot on a cluster): an index to list.
    async def field_put(self, key: str, name: str, value: bytes, ttl_s: float) -> None: ...

    async def fields(self, key: str) -> dict[str, bytes]: ...

    async def field_delete(self, key: str, name: str) -> None: ...

    async def field_add(self, key: str, increments: dict[str, int], ttl_s: float) -> None: ...

    # A capped list under one key, newest first: a log to read back (recent runs).
    async def push_capped(self, key: str, value: bytes, keep: int, ttl_s: float) -> None: ...

    async def newest(self, key: str, count: int, skip: int = 0) -> list[bytes]: ...

    # Budget windows (docs/design.md §13): settle and reserve on every window at once.
    async def spend(self, windows: list[Window], spend: Spend) -> Granted: ...

    async def counters(self, keys: list[str]) -> list[tuple[int, int]]: ...

    async def ping(self) -> None: ...

    async def connect(self) -> None: ...  # once, before serving (a cluster's topology)

    async def aclose(self) -> None: ...
