"""The executor over ``httpx.MockTransport``: every failure becomes a result."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from tool_registry import (
    CallContext,
    EgressPolicy,
    HttpTool,
    ToolExecutor,
    ToolSpec,
    create_tool_transport,
)

pytestmark = pytest.mark.anyio

Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]


def spec(**http: Any) -> ToolSpec:
    return ToolSpec.model_validate(
        {
            "name": "t",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            "http": {"url": "http://tools.example/run", **http},
            "result": {"max_chars": 100000},
        }
    )


async def run(tool: ToolSpec, handler: Handler, arguments: str = '{"q": "x"}') -> Any:
    seen: list[httpx.Request] = []

    async def recording(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return await handler(request)

    async with httpx.MockTransport(recording) as transport:
        executor = ToolExecutor(
            create_tool_transport(EgressPolicy(), inner=transport), backoff_base_s=0
        )
        prepared = HttpTool(tool).prepare(arguments, CallContext("acme"))
        return await executor.execute(prepared), seen


def answer(*responses: httpx.Response) -> Handler:
    queue = list(responses)

    async def handler(request: httpx.Request) -> httpx.Response:
        return queue.pop(0)

    return handler


async def test_success() -> None:
    result, seen = await run(spec(), answer(httpx.Response(200, json={"q": "ok"})))
    assert (result.outcome, result.status, result.content) == ("ok", 200, '{"q":"ok"}')
    assert str(seen[0].url) == "http://tools.example/run?q=x"


async def test_an_error_status_is_a_result_with_the_body() -> None:
    result, _ = await run(spec(), answer(httpx.Response(404, text="no such item")))
    assert result.outcome == "http_error"
    payload = json.loads(result.content)
    assert payload == {"error": "HTTP 404 Not Found", "status": 404, "body": "no such item"}


async def test_idempotent_methods_are_retried() -> None:
    result, seen = await run(
        spec(retries=2),
        answer(
            httpx.Response(503),
            httpx.Response(502, headers={"retry-after": "0"}),
            httpx.Response(200, text="third time"),
        ),
    )
    assert (result.outcome, result.content, len(seen)) == ("ok", "third time", 3)


async def test_retries_stop_at_the_configured_count() -> None:
    result, seen = await run(spec(retries=1), answer(httpx.Response(503), httpx.Response(503)))
    assert (result.outcome, result.status, len(seen)) == ("http_error", 503, 2)


async def test_non_idempotent_methods_are_never_retried() -> None:
    result, seen = await run(spec(method="POST", retries=3), answer(httpx.Response(503)))
    assert (result.status, len(seen)) == (503, 1)


async def test_a_500_is_not_retried() -> None:
    result, seen = await run(spec(retries=3), answer(httpx.Response(500)))
    assert (result.status, len(seen)) == (500, 1)


async def test_timeouts_are_results() -> None:
    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(5)
        return httpx.Response(200)

    result, _ = await run(spec(timeout_s=0.05), slow)
    assert result.outcome == "timeout"
    assert "timed out after 0.05s" in json.loads(result.content)["error"]


async def test_connection_errors_are_results_without_details() -> None:
    async def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused to 10.1.2.3:8080", request=request)

    result, seen = await run(spec(retries=1), refuse)
    assert result.outcome == "http_error"
    assert "10.1.2.3" not in result.content
    assert len(seen) == 2


async def test_the_body_read_is_capped() -> None:
    result, _ = await run(
        spec(max_response_bytes=64), answer(httpx.Response(200, content=b"z" * 10_000))
    )
    assert result.content == "z" * 64 + "…[response cut at the size limit]"


async def test_redirects_are_not_followed_by_default() -> None:
    redirect = httpx.Response(302, headers={"location": "http://elsewhere.example/"})
    result, seen = await run(spec(), answer(redirect, httpx.Response(200)))
    assert (result.outcome, result.status, len(seen)) == ("http_error", 302, 1)


async def test_followed_redirects_are_checked_by_the_egress_guard() -> None:
    redirect = httpx.Response(302, headers={"location": "http://169.254.169.254/latest/"})
    result, seen = await run(spec(follow_redirects=True), answer(redirect, httpx.Response(200)))
    assert result.outcome == "denied"
    assert len(seen) == 1


async def test_followed_redirects_work() -> None:
    redirect = httpx.Response(301, headers={"location": "http://tools.example/moved"})
    result, seen = await run(
        spec(follow_redirects=True), answer(redirect, httpx.Response(200, text="moved"))
    )
    assert (result.content, [r.url.path for r in seen]) == ("moved", ["/run", "/moved"])


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data",
        "http://[fd00:ec2::254]/",
        "http://100.100.100.200/",
    ],
)
async def test_metadata_addresses_are_refused_before_any_request(url: str) -> None:
    result, seen = await run(spec(url=url), answer(httpx.Response(200)))
    assert result.outcome == "denied"
    assert seen == []


async def _with_deadline(tool: ToolSpec, handler: Handler, in_s: float) -> Any:
    async def handle(request: httpx.Request) -> httpx.Response:
        return await handler(request)

    async with httpx.MockTransport(handle) as transport:
        executor = ToolExecutor(
            create_tool_transport(EgressPolicy(), inner=transport), backoff_base_s=0.2
        )
        prepared = HttpTool(tool).prepare('{"q": "x"}', CallContext("acme"))
        return await executor.execute(prepared, asyncio.get_running_loop().time() + in_s)


async def slow(request: httpx.Request) -> httpx.Response:
    await asyncio.sleep(5)
    return httpx.Response(200)


async def test_the_callers_deadline_first_is_a_timeout_error_not_a_result() -> None:
    with pytest.raises(TimeoutError):
        await _with_deadline(spec(timeout_s=5), slow, 0.05)


async def test_the_tools_timeout_first_is_a_result_within_a_later_deadline() -> None:
    result = await _with_deadline(spec(timeout_s=0.05), slow, 10)
    assert result.outcome == "timeout"


async def test_no_retry_starts_past_the_callers_deadline() -> None:
    calls = 0

    async def failing(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(503)

    with pytest.raises(TimeoutError):
        # The backoff (0.2 s and more) would end past the deadline: no second attempt.
        await _with_deadline(spec(retries=3), failing, 0.1)
    assert calls == 1
