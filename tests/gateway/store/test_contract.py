"""One contract, both backends: the memory store and a real Redis."""

from __future__ import annotations

import asyncio

import pytest

from gateway.store import GuardedStore, Keys, StoreUnavailable
from gateway.store.base import gcra
from gateway.store.memory import MemoryStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def store(backend: tuple[GuardedStore, Keys]) -> GuardedStore:
    return backend[0]


@pytest.fixture
def keys(backend: tuple[GuardedStore, Keys]) -> Keys:
    return backend[1]


async def test_acquire_admits_the_limit_then_refuses(store: GuardedStore, keys: Keys) -> None:
    key = keys.rate("acme", "req")
    decisions = [await store.rate(key, 5, 60, 1, "acquire") for _ in range(6)]
    assert [d.allowed for d in decisions] == [True] * 5 + [False]
    assert [d.remaining for d in decisions[:5]] == [4, 3, 2, 1, 0]
    refused = decisions[-1]
    assert 11.0 <= refused.retry_after_s <= 12.1  # one request per 12 s comes back
    assert 59.0 <= refused.reset_s <= 60.1


async def test_concurrent_acquires_admit_exactly_the_limit(store: GuardedStore, keys: Keys) -> None:
    key = keys.rate("acme", "req")
    decisions = await asyncio.gather(*(store.rate(key, 7, 60, 1, "acquire") for _ in range(25)))
    assert sum(d.allowed for d in decisions) == 7


async def test_charge_goes_over_and_peek_refuses_until_it_drains(
    store: GuardedStore, keys: Keys
) -> None:
    key = keys.rate("acme", "tok")
    assert (await store.rate(key, 1000, 60, 1, "peek")).allowed
    charged = await store.rate(key, 1000, 60, 1500, "charge")
    assert charged.allowed
    assert charged.remaining == 0
    peek = await store.rate(key, 1000, 60, 1, "peek")
    assert not peek.allowed
    assert 29.5 <= peek.retry_after_s <= 30.1  # 500 tokens over, at 1000 per minute
    again = await store.rate(key, 1000, 60, 1, "peek")
    assert again.retry_after_s <= peek.retry_after_s  # peeking took nothing


async def test_tenants_do_not_share_counters(store: GuardedStore, keys: Keys) -> None:
    assert (await store.rate(keys.rate("a", "req"), 1, 60, 1, "acquire")).allowed
    assert not (await store.rate(keys.rate("a", "req"), 1, 60, 1, "acquire")).allowed
    assert (await store.rate(keys.rate("b", "req"), 1, 60, 1, "acquire")).allowed


async def test_values_expire(store: GuardedStore, keys: Keys) -> None:
    short, long = keys.turn("acme", "c1"), keys.turn("acme", "c2")
    await store.put(short, b"soon gone", 0.2)
    await store.put(long, b"stays", 60)
    assert await store.get(short) == b"soon gone"
    assert await store.get_many([long, keys.turn("acme", "none"), short]) == [
        b"stays",
        None,
        b"soon gone",
    ]
    await asyncio.sleep(0.35)
    assert await store.get(short) is None
    assert await store.get(long) == b"stays"
    assert await store.get_many([]) == []


async def test_delete_removes_only_the_keys_named(store: GuardedStore, keys: Keys) -> None:
    names = [keys.turn("acme", f"call-{i}") for i in range(3)]
    for name in names:
        await store.put(name, b"v", 60)
    await store.delete(names[:2])
    await store.delete([])
    assert await store.get_many(names) == [None, None, b"v"]


async def test_ping(store: GuardedStore) -> None:
    await store.ping()
    assert store.available


class Hanging(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.hang = True
        self.calls = 0

    async def get(self, key: str) -> bytes | None:
        self.calls += 1
        if self.hang:
            await asyncio.sleep(30)
        return await super().get(key)


async def test_a_hung_store_costs_one_timeout_then_nothing_until_it_is_retried() -> None:
    inner = Hanging()
    guarded = GuardedStore(inner, timeout_s=0.05, cooldown_s=0.3)
    started = asyncio.get_running_loop().time()
    with pytest.raises(StoreUnavailable):
        await guarded.get("k")
    assert asyncio.get_running_loop().time() - started < 0.5
    with pytest.raises(StoreUnavailable):
        await guarded.get("k")  # within the cooldown: not even tried
    assert inner.calls == 1
    assert not guarded.available
    inner.hang = False
    await asyncio.sleep(0.35)
    assert await guarded.get("k") is None  # tried again, and it answers
    assert inner.calls == 2
    assert guarded.errors == 2  # the timeout and the call skipped during the cooldown


async def test_the_memory_store_evicts_its_oldest_values_past_its_size() -> None:
    store = MemoryStore(max_bytes=1000)
    for index in range(10):
        await store.put(f"k{index}", b"x" * 200, 60)
    assert store.evicted == 7
    assert await store.get("k0") is None
    assert await store.get("k9") == b"x" * 200
    await store.put("k7", b"y", 60)  # rewritten: now the newest
    await store.put("k10", b"z" * 200, 60)  # pushes out k8, now the oldest
    assert await store.get("k8") is None
    assert [await store.get(k) for k in ("k9", "k7", "k10")] == [b"x" * 200, b"y", b"z" * 200]


def test_an_exact_fit_is_allowed_whatever_the_clock_reads() -> None:
    """A first request costing the whole budget fits at any clock value, including
    the ones where milliseconds as floats round the sum up: a monotonic clock some
    minutes after boot (a fresh CI machine) hits about one in a hundred."""
    for now in (1_002_000.0 + 0.37 * i for i in range(5000)):
        decision, stored = gcra(None, now, 1, 60_000.0, 1, "acquire")
        assert decision.allowed
        assert stored is not None


async def test_take_gives_a_value_once(store: GuardedStore, keys: Keys) -> None:
    key = keys.approval("acme", "mcpr_1")
    await store.put(key, b"record", 60)
    taken = await asyncio.gather(*(store.take(key) for _ in range(8)))
    assert sorted(taken, key=lambda v: v is None) == [b"record"] + [None] * 7
    assert await store.get(key) is None
    assert await store.take(keys.approval("acme", "never-put")) is None


async def test_put_new_lets_the_first_writer_win(store: GuardedStore, keys: Keys) -> None:
    key = keys.approval("acme", "mcpr_2") + ":decision"
    won = await asyncio.gather(*(store.put_new(key, str(i).encode(), 60) for i in range(8)))
    assert sum(won) == 1
    assert await store.get(key) == str(won.index(True)).encode()
    await store.put(key, b"x", 0.05)
    await asyncio.sleep(0.1)
    assert await store.put_new(key, b"after expiry", 60)  # an expired value is absent


async def test_fields_are_a_map_under_one_key(store: GuardedStore, keys: Keys) -> None:
    key = keys.approvals_pending("acme")
    assert await store.fields(key) == {}
    await store.field_put(key, "a", b"1", 60)
    await store.field_put(key, "b", b"2", 60)
    await store.field_put(key, "a", b"3", 60)
    assert await store.fields(key) == {"a": b"3", "b": b"2"}
    await store.field_delete(key, "a")
    await store.field_delete(key, "missing")
    assert await store.fields(key) == {"b": b"2"}
    assert await store.fields(keys.approvals_pending("other")) == {}
    await store.field_put(key, "c", b"4", 0.05)  # the map's time to live is the last put's
    await asyncio.sleep(0.1)
    assert await store.fields(key) == {}


async def test_a_capped_list_keeps_the_newest_first(store: GuardedStore, keys: Keys) -> None:
    key = keys.runs("acme")
    for n in range(7):
        await store.push_capped(key, f"run-{n}".encode(), 5, 60)
    assert await store.newest(key, 10) == [f"run-{n}".encode() for n in (6, 5, 4, 3, 2)]
    assert await store.newest(key, 2) == [b"run-6", b"run-5"]
    assert await store.newest(key, 2, skip=3) == [b"run-3", b"run-2"]
    assert await store.newest(key, 10, skip=4) == [b"run-2"]
    assert await store.newest(key, 10, skip=9) == []
    assert await store.newest(keys.runs("beta"), 10) == []
    await store.push_capped(keys.runs("short"), b"x", 5, 0.05)
    await asyncio.sleep(0.2)
    assert await store.newest(keys.runs("short"), 10) == []


async def test_fields_add_up(store: GuardedStore, keys: Keys) -> None:
    key = keys.activity("acme", 1)
    await store.field_add(key, {"3:requests": 2, "3:errors": 1}, 60)
    await store.field_add(key, {"3:requests": 5, "4:requests": 1}, 60)
    found = await store.fields(key)
    assert {k: int(v) for k, v in found.items()} == {
        "3:requests": 7,
        "3:errors": 1,
        "4:requests": 1,
    }


async def test_no_value_written_keeps_a_connect_link(backend: tuple[GuardedStore, Keys]) -> None:
    """Whatever writes it (a trace, a stored response, a saved turn, a kept write), a
    connect link is not kept: its user's credential (docs/security.md)."""
    store, keys = backend
    link = b"https://gw.example.com/v1/toolgate/connect/Zk3v9Qm_2bXw-Lr8TqYp1sNc4HdJ6aUe0oVfGiKyMnA"
    value = b'{"said": "connect at ' + link + b'"}'
    kept = b'{"said": "connect at [connect link given]"}'
    await store.put(keys.prefix + "a", value, 60)
    await store.put_new(keys.prefix + "b", value, 60)
    await store.field_put(keys.prefix + "c", "f", value, 60)
    await store.push_capped(keys.prefix + "d", value, 10, 60)
    assert await store.get_many([keys.prefix + "a", keys.prefix + "b"]) == [kept, kept]
    assert await store.fields(keys.prefix + "c") == {"f": kept}
    assert await store.newest(keys.prefix + "d", 1) == [kept]
    await store.delete([keys.prefix + k for k in "abcd"])


class Slowed(MemoryStore):
    """A store whose writes are late for a while, on cue (a busy host)."""

    def __init__(self) -> None:
        super().__init__()
        self.late_until = 0.0  # loop time
        self.puts = 0

    async def put(self, key: str, value: bytes, ttl_s: float) -> None:
        self.puts += 1
        loop = asyncio.get_running_loop()
        if loop.time() < self.late_until:
            await asyncio.sleep(self.late_until - loop.time() + 0.2)
        await super().put(key, value, ttl_s)


async def test_a_kept_write_outlasts_a_passing_stall_and_ends_the_cooldown() -> None:
    inner = Slowed()
    guarded = GuardedStore(inner, timeout_s=0.05, cooldown_s=5.0, keep_retry_s=2.0)
    inner.late_until = asyncio.get_running_loop().time() + 0.2
    with pytest.raises(StoreUnavailable):
        await guarded.put("a", b"1", 60)  # an ordinary write: one try, then skipped
    assert not guarded.available
    await guarded.keep("b", b"2", 60)  # tried whatever the cooldown, until it is taken
    assert inner.puts >= 3
    assert await guarded.get("b") == b"2"
    assert guarded.available  # its success ended the cooldown


async def test_a_kept_write_gives_up_after_its_budget() -> None:
    inner = Slowed()
    guarded = GuardedStore(inner, timeout_s=0.05, keep_retry_s=0.3)
    inner.late_until = asyncio.get_running_loop().time() + 60
    started = asyncio.get_running_loop().time()
    with pytest.raises(StoreUnavailable):
        await guarded.keep("b", b"2", 60)
    assert asyncio.get_running_loop().time() - started < 5  # bounded, not the stall's 60 s
    assert inner.puts >= 2
