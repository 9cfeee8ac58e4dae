"""Bounding the store: a hung or down store costs a request ~100 ms at most once, and
nothing while it is known to be down. What a client is told is kept (``keep``) is the
exception: it is tried again within ``keep_retry_s``, cooldown or not, so one slow call
never loses it. And what it keeps: no value written holds a connect link
(``forget_links``: a link is its user's credential, docs/security.md)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from gateway.errors import StoreUnavailable
from gateway.ops.redaction import forget_links
from gateway.store.base import Granted, RateDecision, RateMode, Spend, Store, Window

logger = logging.getLogger("gateway.store")

T = TypeVar("T")


CONNECT_TIMEOUT_S = 5.0
KEEP_PAUSE_S = 0.05  # before the first retry of a kept write; doubled each time


class GuardedStore:
    """Every call within ``timeout_s``; after a failure the store is skipped (calls fail
    at once) for ``cooldown_s``, then tried again, so service resumes by itself.
    ``timeout_s=None``: a store in the process, whose calls never wait, costs no timer."""

    def __init__(
        self,
        store: Store,
        timeout_s: float | None = 0.1,
        cooldown_s: float = 1.0,
        on_error: Callable[[], None] | None = None,
        keep_retry_s: float = 1.0,
    ) -> None:
        self.inner = store
        self._on_error = on_error
        self._timeout_s = timeout_s
        self._cooldown_s = cooldown_s
        self._keep_retry_s = keep_retry_s
        self._down_until = 0.0
        self.errors = 0  # calls that failed, or were not made because the store was down

    async def _call(self, operation: Awaitable[T], cooldown: bool = True) -> T:
        """``operation`` within ``timeout_s``; not tried while the store is skipped
        (unless ``cooldown`` is False: a kept write's)."""
        if cooldown and time.monotonic() < self._down_until:
            if asyncio.iscoroutine(operation):
                operation.close()
            self._failed()
            raise StoreUnavailable("The shared store is unavailable.")
        try:
            if self._timeout_s is None:
                return await operation
            async with asyncio.timeout(self._timeout_s):
                return await operation
        except (TimeoutError, StoreUnavailable, OSError) as exc:
            self._failed()
            if self._down_until == 0.0 or time.monotonic() >= self._down_until:
                logger.warning(
                    "store unavailable (%s); retrying in %ss", type(exc).__name__, self._cooldown_s
                )
            self._down_until = time.monotonic() + self._cooldown_s
            raise StoreUnavailable("The shared store is unavailable.") from exc

    def _failed(self) -> None:
        self.errors += 1
        if self._on_error is not None:
            self._on_error()

    async def connect(self, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        """Reach the store once before serving (``Store.connect``), waiting longer than a
        call may; a store that cannot be reached is marked down as a call's failure is,
        and the gateway starts anyway."""
        try:
            async with asyncio.timeout(max(timeout_s, self._timeout_s or 0.0)):
                await self.inner.connect()
        except (TimeoutError, StoreUnavailable, OSError) as exc:
            self._failed()
            logger.warning("store unavailable at start (%s)", type(exc).__name__)
            self._down_until = time.monotonic() + self._cooldown_s

    @property
    def available(self) -> bool:
        return time.monotonic() >= self._down_until

    async def rate(
        self, key: str, limit: int, period_s: float, cost: int, mode: RateMode
    ) -> RateDecision:
        return await self._call(self.inner.rate(key, limit, period_s, cost, mode))

    async def get(self, key: str) -> bytes | None:
        return await self._call(self.inner.get(key))

    async def get_many(self, keys: list[str]) -> list[bytes | None]:
        return await self._call(self.inner.get_many(keys))

    async def put(self, key: str, value: bytes, ttl_s: float) -> None:
        await self._call(self.inner.put(key, forget_links(value), ttl_s))

    async def keep(self, key: str, value: bytes, ttl_s: float) -> None:
        """``put`` for what a client is told is kept (a stored response, a conversation,
        the hidden turns of a hand-back): tried at once even while the store is skipped,
        then again after a failure (pauses from ``KEEP_PAUSE_S``, doubling) until
        ``keep_retry_s`` has passed; a success ends the cooldown. StoreUnavailable when
        every try failed: the caller says so to its client."""
        value = forget_links(value)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self._keep_retry_s
        pause = KEEP_PAUSE_S
        while True:
            try:  # tried whatever the last call did; other calls stay skipped meanwhile
                await self._call(self.inner.put(key, value, ttl_s), cooldown=False)
            except StoreUnavailable:
                left = give_up - loop.time()
                if left <= 0:
                    raise
                await asyncio.sleep(min(pause, left))
                pause *= 2
            else:
                self._down_until = 0.0  # it answered: the store is back for every call
                return

    async def delete(self, keys: list[str]) -> None:
        await self._call(self.inner.delete(keys))

    async def take(self, key: str) -> bytes | None:
        return await self._call(self.inner.take(key))

    async def put_new(self, key: str, value: bytes, ttl_s: float) -> bool:
        return await self._call(self.inner.put_new(key, forget_links(value), ttl_s))

    async def delete_if(self, key: str, value: bytes) -> bool:
        return await self._call(self.inner.delete_if(key, value))

    async def field_put(self, key: str, name: str, value: bytes, ttl_s: float) -> None:
        await self._call(self.inner.field_put(key, name, forget_links(value), ttl_s))

    async def fields(self, key: str) -> dict[str, bytes]:
        return await self._call(self.inner.fields(key))

    async def field_delete(self, key: str, name: str) -> None:
        await self._call(self.inner.field_delete(key, name))

    async def field_add(self, key: str, increments: dict[str, int], ttl_s: float) -> None:
        await self._call(self.inner.field_add(key, increments, ttl_s))

    async def push_capped(self, key: str, value: bytes, keep: int, ttl_s: float) -> None:
        await self._call(self.inner.push_capped(key, forget_links(value), keep, ttl_s))

    async def newest(self, key: str, count: int, skip: int = 0) -> list[bytes]:
        return await self._call(self.inner.newest(key, count, skip))

    async def spend(self, windows: list[Window], spend: Spend) -> Granted:
        return await self._call(self.inner.spend(windows, spend))

    async def counters(self, keys: list[str]) -> list[tuple[int, int]]:
        return await self._call(self.inner.counters(keys))

    async def ping(self) -> None:
        """Always asks the store, cooldown or not: readiness must see it come back."""
        self._down_until = 0.0
        await self._call(self.inner.ping())

    async def aclose(self) -> None:
        await self.inner.aclose()
