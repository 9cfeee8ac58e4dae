"""The embedded store: one process, same semantics as Redis."""

from __future__ import annotations

import time

from .base import RateDecision, RateMode, gcra


class MemoryStore:
    """Values with expiry and GCRA state in a dict. Expired entries are dropped when
    read, and swept every ``sweep_every`` writes so the dict cannot grow forever."""

    def __init__(self, sweep_every: int = 10_000) -> None:
        self._values: dict[str, tuple[float, bytes]] = {}  # key → (expires, value)
        self._rates: dict[str, float] = {}  # key → TAT (ms, monotonic)
        self._writes = 0
        self._sweep_every = sweep_every

    @staticmethod
    def _now_ms() -> float:
        return time.monotonic() * 1000

    async def rate(
        self, key: str, limit: int, period_s: float, cost: int, mode: RateMode
    ) -> RateDecision:
        now = self._now_ms()
        decision, tat = gcra(self._rates.get(key), now, limit, period_s * 1000, cost, mode)
        if tat is not None:
            self._rates[key] = tat
            self._wrote()
        return decision

    async def get(self, key: str) -> bytes | None:
        entry = self._values.get(key)
        if entry is None:
            return None
        if entry[0] <= time.monotonic():
            del self._values[key]
            return None
        return entry[1]

    async def get_many(self, keys: list[str]) -> list[bytes | None]:
        return [await self.get(key) for key in keys]

    async def put(self, key: str, value: bytes, ttl_s: float) -> None:
        self._values[key] = (time.monotonic() + ttl_s, value)
        self._wrote()

    async def ping(self) -> None:
        return None

    async def aclose(self) -> None:
        self._values.clear()
        self._rates.clear()

    def _wrote(self) -> None:
        self._writes += 1
        if self._writes % self._sweep_every:
            return
        now = time.monotonic()
        self._values = {k: v for k, v in self._values.items() if v[0] > now}
        now_ms = now * 1000
        self._rates = {k: tat for k, tat in self._rates.items() if tat > now_ms}
