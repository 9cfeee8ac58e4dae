"""The embedded store: one process, same semantics as Redis."""

from __future__ import annotations

import itertools
import time
from collections import deque

from gateway.store.base import Granted, RateDecision, RateMode, Spend, Window, gcra, spend_counters

_ENTRY_OVERHEAD = 100  # bytes a dict entry costs beyond its key and value, roughly


class MemoryStore:
    """Values with expiry and GCRA state in dicts. Expired entries are dropped when
    read and swept every ``sweep_every`` writes; past ``max_bytes`` of values the
    oldest writes are evicted first, as a Redis with ``maxmemory`` would."""

    def __init__(self, max_bytes: int = 8 * 1024 * 1024, sweep_every: int = 10_000) -> None:
        self._values: dict[str, tuple[float, bytes]] = {}  # key → (expires, value)
        self._rates: dict[str, float] = {}  # key → TAT (ms, monotonic)
        self._maps: dict[str, tuple[float, dict[str, bytes]]] = {}  # key → (expires, fields)
        self._counters: dict[str, tuple[float, tuple[int, int]]] = {}  # key → (expires, spent)
        self._lists: dict[str, tuple[float, deque[bytes]]] = {}  # key → (expires, newest first)
        self._writes = 0
        self._sweep_every = sweep_every
        self._max_bytes = max_bytes
        self._bytes = 0
        self.evicted = 0

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
            self._drop(key)
            return None
        return entry[1]

    async def get_many(self, keys: list[str]) -> list[bytes | None]:
        return [await self.get(key) for key in keys]

    async def put(self, key: str, value: bytes, ttl_s: float) -> None:
        self._drop(key)  # a rewrite is the newest entry again
        self._values[key] = (time.monotonic() + ttl_s, value)
        self._bytes += _size(key, value)
        while self._bytes > self._max_bytes and self._values:
            self._drop(next(iter(self._values)))
            self.evicted += 1
        self._wrote()

    async def delete(self, keys: list[str]) -> None:
        for key in keys:
            self._drop(key)

    async def take(self, key: str) -> bytes | None:
        value = await self.get(key)
        self._drop(key)
        return value

    async def delete_if(self, key: str, value: bytes) -> bool:
        if await self.get(key) != value:
            return False
        self._drop(key)
        return True

    async def put_new(self, key: str, value: bytes, ttl_s: float) -> bool:
        if await self.get(key) is not None:
            return False
        await self.put(key, value, ttl_s)
        return True

    async def field_put(self, key: str, name: str, value: bytes, ttl_s: float) -> None:
        fields = await self.fields(key)
        fields[name] = value
        self._maps[key] = (time.monotonic() + ttl_s, fields)
        self._wrote()

    async def fields(self, key: str) -> dict[str, bytes]:
        entry = self._maps.get(key)
        if entry is None or entry[0] <= time.monotonic():
            self._maps.pop(key, None)
            return {}
        return entry[1]

    async def field_delete(self, key: str, name: str) -> None:
        (await self.fields(key)).pop(name, None)

    async def field_add(self, key: str, increments: dict[str, int], ttl_s: float) -> None:
        fields = await self.fields(key)
        for name, amount in increments.items():
            fields[name] = str(int(fields.get(name, b"0")) + amount).encode()
        self._maps[key] = (time.monotonic() + ttl_s, fields)
        self._wrote()

    async def push_capped(self, key: str, value: bytes, keep: int, ttl_s: float) -> None:
        entry = self._lists.get(key)
        now = time.monotonic()
        listed = entry[1] if entry is not None and entry[0] > now else deque()
        listed.appendleft(value)
        while len(listed) > keep:
            listed.pop()
        self._lists[key] = (now + ttl_s, listed)
        self._wrote()

    async def newest(self, key: str, count: int, skip: int = 0) -> list[bytes]:
        entry = self._lists.get(key)
        if entry is None or entry[0] <= time.monotonic():
            self._lists.pop(key, None)
            return []
        return list(itertools.islice(entry[1], skip, skip + max(count, 0)))

    async def spend(self, windows: list[Window], spend: Spend) -> Granted:
        now = time.monotonic()
        keys = [w.key for w in windows]
        before = await self.counters(keys)
        granted, after = spend_counters(before, windows, spend)
        for window, counter in zip(windows, after, strict=True):
            entry = self._counters.get(window.key)
            expires = entry[0] if entry is not None else now + window.ttl_s
            self._counters[window.key] = (expires, counter)
        self._wrote()
        return granted

    async def counters(self, keys: list[str]) -> list[tuple[int, int]]:
        now, found = time.monotonic(), []
        for key in keys:
            entry = self._counters.get(key)
            if entry is not None and entry[0] <= now:
                del self._counters[key]
                entry = None
            found.append(entry[1] if entry is not None else (0, 0))
        return found

    def _drop(self, key: str) -> None:
        entry = self._values.pop(key, None)
        if entry is not None:
            self._bytes -= _size(key, entry[1])

    async def ping(self) -> None:
        return None

    async def connect(self) -> None:
        return None

    async def aclose(self) -> None:
        self._values.clear()
        self._rates.clear()
        self._maps.clear()
        self._lists.clear()
        self._counters.clear()
        self._bytes = 0

    def _wrote(self) -> None:
        self._writes += 1
        if self._writes % self._sweep_every:
            return
        now = time.monotonic()
        for key in [k for k, v in self._values.items() if v[0] <= now]:
            self._drop(key)
        now_ms = now * 1000
        self._rates = {k: tat for k, tat in self._rates.items() if tat > now_ms}
        self._maps = {k: entry for k, entry in self._maps.items() if entry[0] > now}
        self._lists = {k: entry for k, entry in self._lists.items() if entry[0] > now}
        self._counters = {k: entry for k, entry in self._counters.items() if entry[0] > now}


def _size(key: str, value: bytes) -> int:
    return len(key) + len(value) + _ENTRY_OVERHEAD
