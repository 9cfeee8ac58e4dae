"""Recent runs in the store (docs/design.md §19): kept only while the console is on, newest
first per tenant and capped, merged across tenants by when they began; a row that is
damaged or of another shape is skipped, not a failure of the listing."""

from __future__ import annotations

import pytest

from gateway.config import ConsoleConfig
from gateway.store import GuardedStore, Keys
from gateway.store.runs import RunLog, RunRow

pytestmark = pytest.mark.anyio


def row(request_id: str, at: float, tenant: str = "acme", **extra: object) -> RunRow:
    fields = {"model": "m", "route": "/v1/chat/completions", "status": 200, "latency_ms": 1.0}
    return RunRow(request_id, at, tenant, **(fields | extra))  # type: ignore[arg-type]


async def test_rows_are_kept_capped_and_merged_newest_first(
    backend: tuple[GuardedStore, Keys],
) -> None:
    store, keys = backend
    console = ConsoleConfig(enabled=True, runs_kept=3)
    log = RunLog(store, keys, lambda: console)
    for n, (tenant, at) in enumerate([("acme", 1.0), ("beta", 2.0), ("acme", 3.0)]):
        await log.add(row(f"r{n}", at, tenant, tools=("a", "b")))
    for n in range(3, 6):
        await log.add(row(f"r{n}", 10.0 + n))
    newest = (await log.scan(["acme", "beta"], lambda r: True, 100)).rows
    assert [r.request_id for r in newest] == ["r5", "r4", "r3", "r1"]
    assert newest[-1].tools == ("a", "b")
    assert await log.find("beta", "r1") == row("r1", 2.0, "beta", tools=("a", "b"))
    assert await log.find("acme", "r0") is None  # past the cap


async def test_nothing_is_kept_while_the_console_is_off(backend: tuple[GuardedStore, Keys]) -> None:
    store, keys = backend
    config = ConsoleConfig(enabled=False)
    log = RunLog(store, keys, lambda: config)
    assert log.keeping is False
    await log.add(row("r1", 1.0))
    assert await store.newest(keys.runs("acme"), 10) == []


async def test_damaged_rows_are_skipped(backend: tuple[GuardedStore, Keys]) -> None:
    store, keys = backend
    console = ConsoleConfig(enabled=True)
    log = RunLog(store, keys, lambda: console)
    await log.add(row("good-1", 1.0))
    junk_rows = (
        b"{not json",
        b"[1, 2]",
        b'{"request_id": "x"}',
        b"null",
        b'[2, "another version"]',
        b'[1, 5, 1.0, "acme", "m", "/r", 200, 1.0, 0, 0, [], null, 0, 0, null, null]',
    )
    for junk in junk_rows:
        await store.push_capped(keys.runs("acme"), junk, 100, 60)
    await log.add(row("good-2", 2.0))
    listed = await log.scan(["acme"], lambda r: True, 100)
    assert [r.request_id for r in listed.rows] == ["good-2", "good-1"]


async def test_a_scan_reads_a_page_then_chunks_until_it_has_enough(
    backend: tuple[GuardedStore, Keys], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, keys = backend
    console = ConsoleConfig(enabled=True)
    log = RunLog(store, keys, lambda: console)
    monkeypatch.setattr("gateway.store.runs.CHUNK", 7)
    for n in range(30):
        await log.add(row(f"r{n}", float(n), status=500 if n % 10 == 0 else 200))
    everything = await log.scan(["acme"], lambda r: True, 5)
    assert [r.request_id for r in everything.rows] == ["r29", "r28", "r27", "r26", "r25"]
    assert (everything.read, everything.complete) == (5, False)  # one page read
    failed = await log.scan(["acme"], lambda r: r.status == 500, 5)
    assert [r.request_id for r in failed.rows] == ["r20", "r10", "r0"]
    assert (failed.matched, failed.read, failed.complete) == (3, 30, True)
    assert await log.find("acme", "r3") == row("r3", 3.0)
    assert await log.find("acme", "r30") is None


async def test_many_tenants_share_what_one_listing_reads(
    backend: tuple[GuardedStore, Keys], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, keys = backend
    console = ConsoleConfig(enabled=True)
    log = RunLog(store, keys, lambda: console)
    monkeypatch.setattr("gateway.store.runs.MAX_READ", 12)
    tenants = ["t1", "t2", "t3", "t4"]
    for n in range(5):
        for tenant in tenants:
            await log.add(row(f"{tenant}-{n}", float(n), tenant))
    listed = await log.scan(tenants, lambda r: True, 10)
    assert listed.read == 12  # 3 each: not 10 each past the bound
    assert listed.complete is False
    assert {r.request_id for r in listed.rows[:4]} == {f"{t}-4" for t in tenants}


async def test_rows_of_the_version_before_outcomes_are_still_listed(
    backend: tuple[GuardedStore, Keys],
) -> None:
    store, keys = backend
    console = ConsoleConfig(enabled=True)
    log = RunLog(store, keys, lambda: console)
    older = b'[1, "old-1", 1.0, "acme", "m", "/r", 200, 1.0, 1, 0, [], null, 0, 0, null, null]'
    await store.push_capped(keys.runs("acme"), older, 100, 60)
    await log.add(row("new-1", 2.0, outcome="tool_failed"))
    listed = (await log.scan(["acme"], lambda r: True, 100)).rows
    assert [(r.request_id, r.outcome) for r in listed] == [("new-1", "tool_failed"), ("old-1", "")]


async def test_a_row_written_again_by_a_retry_is_listed_once(
    backend: tuple[GuardedStore, Keys],
) -> None:
    """A row's write that timed out after the store took it is tried again (Afterwards):
    the list keeps both, the listing shows one."""
    store, keys = backend
    console = ConsoleConfig(enabled=True)
    log = RunLog(store, keys, lambda: console)
    await log.add(row("r1", 1.0))
    await log.add(row("r2", 2.0))
    await log.add(row("r2", 2.0))  # the retry
    listed = await log.scan(["acme"], lambda r: True, 100)
    assert [r.request_id for r in listed.rows] == ["r2", "r1"]
    assert listed.matched == 2
