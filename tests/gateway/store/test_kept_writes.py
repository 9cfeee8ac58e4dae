"""Kept write results (docs/design.md §16) on every backend: a write is made once under a
scope however many attempts ask at once; a retry finds it; an attempt that ended
before its result leaves it ``unknown``, never made again; an Idempotency-Key binds
its body. And which requests have a scope, from a table."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.config import IdempotencyConfig
from gateway.errors import BadRequest, IdempotencyKeyReused
from gateway.policy.idempotency import write_scope
from gateway.store import GuardedStore, Keys
from gateway.store.kept_writes import UNKNOWN, KeptWrites, WriteScope
from tool_registry import CallContext, HttpTool, ToolResult, ToolSpec

pytestmark = pytest.mark.anyio

CONFIG = IdempotencyConfig()
TOOL = HttpTool(
    ToolSpec.model_validate({"name": "file", "http": {"url": "http://t.test/f", "method": "POST"}})
)


def _call(title: str = "a") -> Any:
    return TOOL.prepare(f'{{"title": "{title}"}}', CallContext("t"))


def _scope(key: str = "k", body: bytes = b"{}", retry: bool = True) -> WriteScope:
    headers = {"idempotency-key": key} if retry else {"x-stainless-retry-count": "0"}
    scope = write_scope(headers, "t", "owner", body, CONFIG)
    assert scope is not None
    return scope


@pytest.mark.parametrize(
    ("headers", "explicit", "retry", "ttl_s"),
    [
        ({"idempotency-key": "abc"}, True, True, 86400.0),
        ({"idempotency-key": "abc", "x-stainless-retry-count": "0"}, True, True, 86400.0),
        ({"x-stainless-retry-count": "0"}, False, False, 600.0),
        ({"x-stainless-retry-count": "2"}, False, True, 600.0),
    ],
)
def test_which_requests_keep_their_writes(
    headers: dict[str, str], explicit: bool, retry: bool, ttl_s: float
) -> None:
    scope = write_scope(headers, "t", "o", b"{}", CONFIG)
    assert scope is not None
    assert (scope.explicit, scope.retry, scope.ttl_s) == (explicit, retry, ttl_s)
    assert scope.claims is (explicit or retry)


def test_what_has_no_scope_and_what_is_refused() -> None:
    for headers in ({}, {"x-stainless-retry-count": "-1"}, {"x-stainless-retry-count": "x"}):
        assert write_scope(headers, "t", "o", b"{}", CONFIG) is None
    assert (
        write_scope({"idempotency-key": "k"}, "t", "o", b"", IdempotencyConfig(enabled=False))
        is None
    )
    for bad in ("", "k" * 256, "a\x00b"):
        with pytest.raises(BadRequest):
            write_scope({"idempotency-key": bad}, "t", "o", b"{}", CONFIG)


def test_an_sdk_scope_is_the_body_and_a_key_scope_is_the_key() -> None:
    first = write_scope({"x-stainless-retry-count": "0"}, "t", "o", b'{"a":1}', CONFIG)
    retry = write_scope({"x-stainless-retry-count": "1"}, "t", "o", b'{"a":1}', CONFIG)
    other = write_scope({"x-stainless-retry-count": "1"}, "t", "o", b'{"a":2}', CONFIG)
    someone = write_scope({"x-stainless-retry-count": "1"}, "t", "p", b'{"a":1}', CONFIG)
    assert first is not None
    assert retry is not None
    assert other is not None
    assert someone is not None
    assert first.id == retry.id != other.id
    assert someone.id != retry.id  # another caller of the tenant
    assert _scope(body=b"1").id == _scope(body=b"2").id  # a key names the request


async def test_concurrent_attempts_make_a_write_once(backend: tuple[GuardedStore, Keys]) -> None:
    kept = KeptWrites(*backend)
    made = 0

    async def make() -> ToolResult:
        nonlocal made
        made += 1
        await asyncio.sleep(0.1)
        return ToolResult('{"id": 7}', "ok", 201)

    loop = asyncio.get_running_loop()
    attempts = [kept.of("t", _scope()).once(_call(), make, loop.time() + 5) for _ in range(5)]
    results = await asyncio.gather(*attempts)
    assert made == 1
    assert {r.content for r, _ in results} == {'{"id": 7}'}
    assert sorted(k for _, k in results) == [False, True, True, True, True]
    # A later retry finds it before anything is judged; another call is not there.
    found = await kept.of("t", _scope()).kept([_call(), _call("b")])
    assert list(found) == [_call().key]
    assert found[_call().key].status == 201


async def test_an_attempt_cut_short_leaves_it_unknown(backend: tuple[GuardedStore, Keys]) -> None:
    kept = KeptWrites(*backend)
    started = asyncio.Event()

    async def hangs() -> ToolResult:
        started.set()
        await asyncio.sleep(60)
        raise AssertionError("not reached")

    task = asyncio.create_task(kept.of("t", _scope()).once(_call(), hangs, None))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    async def never() -> ToolResult:
        raise AssertionError("made again")

    result, was_kept = await kept.of("t", _scope()).once(_call(), never, None)
    assert was_kept
    assert UNKNOWN in result.content


async def test_a_key_binds_its_body(backend: tuple[GuardedStore, Keys]) -> None:
    kept = KeptWrites(*backend)
    await kept.bind_body("t", _scope(body=b"one"))
    await kept.bind_body("t", _scope(body=b"one"))  # the same again: fine
    with pytest.raises(IdempotencyKeyReused):
        await kept.bind_body("t", _scope(body=b"two"))
    await kept.bind_body("t", _scope("other", body=b"two"))


async def test_a_first_attempt_keeps_without_taking(backend: tuple[GuardedStore, Keys]) -> None:
    """An SDK's first attempt makes its write even when an earlier identical request
    made one (a user asking twice), and keeps it for its own retries."""
    kept = KeptWrites(*backend)
    made = 0

    async def make() -> ToolResult:
        nonlocal made
        made += 1
        return ToolResult("ok", "ok", 200)

    for _ in range(2):
        _, was_kept = await kept.of("t", _scope(retry=False)).once(_call(), make, None)
        assert not was_kept
    assert made == 2


async def test_a_retry_racing_its_first_attempt_waits_for_its_write(
    backend: tuple[GuardedStore, Keys],
) -> None:
    """The SDK gave up on the first attempt while its write was being made, and its
    retry came at once: the retry waits for that write, and does not make it."""
    kept = KeptWrites(*backend)
    made = 0

    async def make() -> ToolResult:
        nonlocal made
        made += 1
        await asyncio.sleep(0.2)
        return ToolResult("filed", "ok", 201)

    deadline = asyncio.get_running_loop().time() + 5
    first = asyncio.create_task(kept.of("t", _scope(retry=False)).once(_call(), make, deadline))
    await asyncio.sleep(0.05)  # the first attempt's write is under way
    retry = write_scope({"x-stainless-retry-count": "1"}, "t", "owner", b"{}", CONFIG)
    assert retry is not None
    (result, was_kept), _ = await asyncio.gather(
        kept.of("t", retry).once(_call(), make, deadline), first
    )
    assert made == 1
    assert was_kept
    assert result.content == "filed"
