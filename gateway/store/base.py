"""The store interface and the rate-limit algorithm both backends share."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Protocol

RateMode = Literal["acquire", "charge", "peek"]


@dataclass(frozen=True, slots=True)
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

    # A small map under one key (one hash slot on a cluster): an index to list.
    async def field_put(self, key: str, name: str, value: bytes, ttl_s: float) -> None: ...

    async def fields(self, key: str) -> dict[str, bytes]: ...

    async def field_delete(self, key: str, name: str) -> None: ...

    async def ping(self) -> None: ...

    async def aclose(self) -> None: ...
