"""The request boundary's timers: a body that is late, a client that leaves, and the
handler's task left as it was found (no stray cancellation) whatever happens."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message

from gateway import GatewayConfig, create_app
from gateway.config import ServerConfig
from gateway.policy.large_bodies import LargeBodies
from gateway.surfaces.http import WATCH_AFTER_S, Exchange, endpoint, json_response, read_body

pytestmark = pytest.mark.anyio
BODIES = LargeBodies()


def server(body_timeout_s: float = 5) -> ServerConfig:
    return ServerConfig(
        max_body_bytes=100, large_bodies_held_bytes=100, body_timeout_s=body_timeout_s
    )


SCOPE: dict[str, Any] = {
    "type": "http",
    "method": "POST",
    "path": "/x",
    "raw_path": b"/x",
    "query_string": b"",
    "headers": [(b"content-type", b"application/json")],
}


def _request(messages: list[Message], then: asyncio.Event) -> Request:
    """A request whose ``receive`` gives ``messages``, then waits for ``then`` and
    reports the client gone."""
    queue = list(messages)

    async def receive() -> Message:
        if queue:
            return queue.pop(0)
        await then.wait()
        return {"type": "http.disconnect"}

    return Request(SCOPE, receive)


BODY: Message = {"type": "http.request", "body": b"{}", "more_body": False}


async def _run(
    handler: Callable[[Request, Exchange], Awaitable[Response]], request: Request
) -> Response:
    return await endpoint(handler)(request)


def _error(response: Response) -> dict[str, Any]:
    return dict(json.loads(bytes(response.body))["error"])


async def test_a_client_that_leaves_cancels_the_handler_and_leaves_no_stray_cancel() -> None:
    left = asyncio.Event()
    reached: list[str] = []

    async def handler(request: Request, exchange: Exchange) -> Response:
        await read_body(request, exchange, server(), BODIES)
        asyncio.get_running_loop().call_later(WATCH_AFTER_S * 2, left.set)
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            reached.append("cancelled")
            raise
        return json_response({})

    response = await _run(handler, _request([BODY], left))
    assert reached == ["cancelled"]
    assert response.status_code == 499
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0
    await asyncio.sleep(0)  # no cancellation is pending for this task either


async def test_a_handler_that_swallows_the_cancel_still_leaves_the_task_clean() -> None:
    left = asyncio.Event()

    async def handler(request: Request, exchange: Exchange) -> Response:
        await read_body(request, exchange, server(), BODIES)
        asyncio.get_running_loop().call_later(WATCH_AFTER_S * 2, left.set)
        with contextlib.suppress(asyncio.CancelledError):  # as some library might
            await asyncio.sleep(10)
        return json_response({"late": True})

    response = await _run(handler, _request([BODY], left))
    assert response.status_code == 499  # nobody reads it: it is what the log says
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0
    await asyncio.sleep(0)


async def test_a_quick_answer_starts_no_watcher() -> None:
    never = asyncio.Event()

    async def handler(request: Request, exchange: Exchange) -> Response:
        await read_body(request, exchange, server(), BODIES)
        return json_response({"ok": True})

    before = asyncio.all_tasks()
    response = await _run(handler, _request([BODY], never))
    assert response.status_code == 200
    await asyncio.sleep(WATCH_AFTER_S * 2)
    assert asyncio.all_tasks() <= before  # no watcher was started


async def test_a_late_body_is_a_408_that_closes_the_connection() -> None:
    never = asyncio.Event()
    first: Message = {"type": "http.request", "body": b"{", "more_body": True}

    async def handler(request: Request, exchange: Exchange) -> Response:
        await read_body(request, exchange, server(0.05), BODIES)
        return json_response({})

    # The second receive waits for ever: the body never completes.
    response = await _run(handler, _request([first], never))
    assert response.status_code == 408
    assert response.headers["connection"] == "close"
    assert _error(response)["code"] == "request_body_timeout"
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0


async def test_a_body_slower_than_the_watch_keeps_its_own_deadline() -> None:
    """The one timer first fires before the body is in: it then waits for the body's
    deadline, which still answers 408."""
    never = asyncio.Event()
    first: Message = {"type": "http.request", "body": b"{", "more_body": True}

    async def handler(request: Request, exchange: Exchange) -> Response:
        await read_body(request, exchange, server(WATCH_AFTER_S * 3), BODIES)
        return json_response({})

    response = await _run(handler, _request([first], never))
    assert response.status_code == 408
    assert _error(response)["code"] == "request_body_timeout"
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0


async def test_a_client_that_leaves_after_a_slow_body_is_still_noticed() -> None:
    """The body comes in after the timer first fired (and waits for the body's deadline):
    once it is in, the watch for the client leaving starts all the same."""
    left = asyncio.Event()
    read: list[bytes] = []
    received = 0

    async def receive() -> Message:
        nonlocal received
        received += 1
        if received == 1:
            return {"type": "http.request", "body": b"{", "more_body": True}
        if received == 2:
            await asyncio.sleep(WATCH_AFTER_S * 3)  # past the timer's first firing
            return {"type": "http.request", "body": b"}", "more_body": False}
        await left.wait()
        return {"type": "http.disconnect"}

    async def handler(request: Request, exchange: Exchange) -> Response:
        read.append(await read_body(request, exchange, server(60), BODIES))
        asyncio.get_running_loop().call_later(WATCH_AFTER_S * 2, left.set)
        # Answered long after the client left, unless the watch noticed (its timers
        # all come before this one's, however loaded the machine).
        await asyncio.sleep(WATCH_AFTER_S * 40)
        return json_response({})

    response = await _run(handler, Request(SCOPE, receive))
    assert read == [b"{}"]
    assert response.status_code == 499
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0


async def test_a_body_over_the_limit_is_a_413_that_closes_the_connection() -> None:
    never = asyncio.Event()
    chunks: list[Message] = [{"type": "http.request", "body": b"x" * 60, "more_body": True}] * 2

    async def handler(request: Request, exchange: Exchange) -> Response:
        await read_body(request, exchange, server(), BODIES)
        return json_response({})

    response = await _run(handler, _request(chunks, never))
    assert response.status_code == 413
    assert response.headers["connection"] == "close"


async def test_a_cancel_from_outside_is_not_swallowed() -> None:
    never = asyncio.Event()
    started = asyncio.Event()

    async def handler(request: Request, exchange: Exchange) -> Response:
        await read_body(request, exchange, server(), BODIES)
        started.set()
        await asyncio.sleep(10)
        return json_response({})

    task = asyncio.ensure_future(_run(handler, _request([BODY], never)))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.anyio
async def test_a_fault_in_a_run_is_logged_whole_then_let_go(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An error nothing expected (a fault of the gateway's, here raised by the tools'
    transport under a run) reaches the boundary with the traceback of where it was
    raised, is logged with it, and only then let go (``errors.settle``): the run's end
    does not cut it first."""

    def broken(request: httpx.Request) -> httpx.Response:
        raise RuntimeError("a fault deep in the run")

    def model(request: httpx.Request) -> httpx.Response:
        call = {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        return httpx.Response(200, json={"choices": [{"index": 0, "message": message}]})

    data = {
        "upstreams": [{"name": "up", "base_url": "http://model.test/v1", "max_retries": 0}],
        "models": [{"name": "m", "upstream": "up"}],
        "tools": [{"name": "t", "description": "t", "http": {"url": "http://tools.test/t"}}],
    }
    app = create_app(
        GatewayConfig.model_validate(data),
        upstream_transport=httpx.MockTransport(model),
        tool_transport=httpx.MockTransport(broken),
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            body = {"model": "m", "messages": [{"role": "user", "content": "go"}]}
            answer = await client.post("/v1/chat/completions", json=body)
    assert answer.status_code == 500
    assert "a fault deep in the run" not in answer.text
    [logged] = [r for r in caplog.records if r.getMessage().startswith("unhandled error")]
    assert logged.exc_info is not None
    assert ", in broken" in logging.Formatter().formatException(logged.exc_info)  # the frame
