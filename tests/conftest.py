from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck, settings

from tests.support.redis_servers import MISSING, Cluster, SentinelSet, redis_tools
from tests.support.scripted import Harness

# Fuzz tests run a bounded, repeatable set of examples in `make test`; set
# TOOLGATE_FUZZ_EXAMPLES (say 5000) for a longer, randomised run.
_FUZZ_EXAMPLES = os.environ.get("TOOLGATE_FUZZ_EXAMPLES")
settings.register_profile(
    "toolgate",
    max_examples=int(_FUZZ_EXAMPLES or 100),
    derandomize=_FUZZ_EXAMPLES is None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile("toolgate")

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
HOW_TO_START = (
    "start one with `redis-server --daemonize yes --port 6379 --save '' --appendonly no` "
    "(`make test` does this itself when redis-server is installed), point REDIS_URL at "
    "another, or set TOOLGATE_SKIP_REDIS=1 to skip the Redis tests"
)


# The two tiers (``pytest -m fast``, ``pytest -m wire``). ``fast``: in-process, the app
# between ``httpx.ASGITransport`` and ``MockTransport`` fakes, and the store on memory
# or the shared Redis. ``wire``: real servers on loopback ports and real processes —
# the gateway under uvicorn, fake upstreams and tools, MCP servers, the SDKs, a Redis
# Cluster or Sentinel started for the run, the CLI.
WIRE_FOLDERS = frozenset({"e2e", "faults", "security", "browser"})
WIRE_FILES = frozenset({"test_deploy_files.py", "test_kubernetes.py", "test_gc_tuning.py"})
WIRE_FIXTURES = frozenset({"harness", "stack", "redis_cluster_url", "redis_sentinel_url"})
WIRE_BACKENDS = frozenset({"cluster", "sentinel"})  # the store tests' own servers


def tier_of(item: pytest.Item) -> str:
    parts = item.path.relative_to(Path(__file__).parent).parts
    if parts[0] in WIRE_FOLDERS or parts[-1] in WIRE_FILES:
        return "wire"
    if WIRE_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return "wire"
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("backend") in WIRE_BACKENDS:
        return "wire"
    return "fast"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(tier_of(item))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def redis_url() -> str:
    """A reachable Redis, or a failure saying how to get one (a skip only if asked)."""
    if os.environ.get("TOOLGATE_SKIP_REDIS") == "1":
        pytest.skip("TOOLGATE_SKIP_REDIS=1")
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1, socket_timeout=1)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis is not reachable at {REDIS_URL} ({exc}): {HOW_TO_START}.")
    finally:
        client.close()
    return REDIS_URL


@pytest.fixture(scope="session")
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A key prefix for this test run; every key under it is deleted afterwards."""
    prefix = f"toolgate-test-{uuid.uuid4().hex[:12]}:"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """A 3-node Redis Cluster on loopback, for this test run."""
    if not redis_tools():
        pytest.skip(MISSING)
    cluster = Cluster()
    try:
        yield cluster.url
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def redis_sentinel_url() -> Iterator[str]:
    """A master, a replica and a sentinel on loopback, for this test run."""
    if not redis_tools():
        pytest.skip(MISSING)
    sentinels = SentinelSet()
    try:
        yield sentinels.url
    finally:
        sentinels.stop()


@pytest.fixture
def harness() -> Iterator[Harness]:
    """Servers for one test (gateway, scripted model, recording tools), all stopped at
    its end."""
    started = Harness()
    yield started
    started.close()
