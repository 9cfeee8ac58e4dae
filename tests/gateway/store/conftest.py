"""The store tests' backends: each test runs on the memory store, on a real Redis, on
a real 3-node Redis Cluster and behind a real Sentinel (started for the run)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from gateway.store import GuardedStore, Keys
from gateway.store.memory import MemoryStore
from gateway.store.redis import RedisStore, redis_client

URLS = {"redis": "redis_url", "cluster": "redis_cluster_url", "sentinel": "redis_sentinel_url"}


@pytest.fixture(params=["memory", "redis", "cluster", "sentinel"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[tuple[GuardedStore, Keys]]:
    """A store and keys no other test uses (under the run's prefix on the shared
    Redis; the cluster and the sentinel set are the run's own)."""
    fresh = uuid.uuid4().hex[:8]
    if request.param == "memory":
        store = GuardedStore(MemoryStore(), timeout_s=2.0)
        keys = Keys(f"mem-{fresh}:")
    else:
        url = request.getfixturevalue(URLS[request.param])
        store = GuardedStore(RedisStore(redis_client(url, timeout_s=2.0)), 2.0)
        await store.connect()
        prefix = request.getfixturevalue("redis_prefix") if request.param == "redis" else ""
        keys = Keys(f"{prefix}{fresh}:")
    yield store, keys
    await store.aclose()
