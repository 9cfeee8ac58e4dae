"""The store tests' backends: each test runs on the memory store and on a real Redis."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from gateway.store import GuardedStore, Keys
from gateway.store.memory import MemoryStore
from gateway.store.redis import RedisStore, redis_client


@pytest.fixture(params=["memory", "redis"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[tuple[GuardedStore, Keys]]:
    """A store and keys no other test uses (under the run's prefix on Redis)."""
    fresh = uuid.uuid4().hex[:8]
    if request.param == "memory":
        store = GuardedStore(MemoryStore(), timeout_s=2.0)
        keys = Keys(f"mem-{fresh}:")
    else:
        store = GuardedStore(
            RedisStore(redis_client(request.getfixturevalue("redis_url"), timeout_s=2.0)), 2.0
        )
        keys = Keys(f"{request.getfixturevalue('redis_prefix')}{fresh}:")
    yield store, keys
    await store.aclose()
