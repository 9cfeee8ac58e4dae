"""Choosing the backend from ``store.url``."""

from __future__ import annotations

from collections.abc import Callable

from gateway.store.guard import GuardedStore
from gateway.store.memory import MemoryStore


def open_store(
    url: str,
    timeout_s: float = 0.1,
    on_error: Callable[[], None] | None = None,
    memory_max_bytes: int = 8 * 1024 * 1024,
    keep_retry_s: float = 1.0,
) -> GuardedStore:
    if url.startswith("memory://"):  # in the process: nothing to wait for, no timer
        return GuardedStore(MemoryStore(memory_max_bytes), None, on_error=on_error)
    from gateway.store.redis import RedisStore, redis_client  # only needed, and imported, for Redis

    return GuardedStore(
        RedisStore(redis_client(url, timeout_s=timeout_s)),
        timeout_s,
        on_error=on_error,
        keep_retry_s=keep_retry_s,
    )
