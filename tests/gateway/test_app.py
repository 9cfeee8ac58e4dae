"""The app in-process: ``httpx.ASGITransport`` in front, ``MockTransport`` behind."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway import ConfigError, GatewayConfig, create_app
from gateway.surfaces.http import Exchange, endpoint
from tests.support.schema import assert_valid_completion, assert_valid_error

pytestmark = pytest.mark.anyio

CONFIG: dict[str, Any] = {
    "upstreams": [{"name": "up", "base_url": "http://upstream.test/v1", "max_retries": 0}],
    "models": [{"name": "m", "upstream": "up"}],
    "tools": [
        {
            "name": "double",
            "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}},
            "http": {"url": "http://tools.test/double/{n}"},
            "result": {"pick": "value"},
        },
        {"name": "metadata", "http": {"url": "http://169.254.169.254/latest"}},
    ],
}

Handler = Callable[[httpx.Request], httpx.Response]


def completion(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3},
    }


@asynccontextmanager
async def gateway(upstream: Handler, tools: Handler) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(
        GatewayConfig.model_validate(CONFIG),
        upstream_transport=httpx.MockTransport(upstream),
        tool_transport=httpx.MockTransport(tools),
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            yield client


def scripted(arguments: Any = '{"n": 21}') -> Handler:
    """A model that calls the first tool it is offered once, then quotes the result."""

    def model(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        results = [m for m in body["messages"] if m["role"] == "tool"]
        if results:
            message: dict[str, Any] = {
                "role": "assistant",
                "content": f"got {results[0]['content']}",
            }
            return httpx.Response(200, json=completion(message))
        name = body["tools"][0]["function"]["name"]
        call = {"id": "t1", "type": "function", "function": {"name": name, "arguments": arguments}}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        return httpx.Response(200, json=completion(message))

    return model


model = scripted()


@pytest.mark.parametrize("arguments", ['{"n": 21}', {"n": 21}, '{"n": "21"}'])
async def test_a_tool_round_in_process(arguments: Any) -> None:
    def double(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"value": int(request.url.path.rsplit("/", 1)[1]) * 2})

    async with gateway(scripted(arguments), double) as client:
        response = await client.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "double 21"}]},
        )
    assert response.status_code == 200
    assert_valid_completion(response.json())
    assert response.json()["choices"][0]["message"]["content"] == "got 42"
    assert response.json()["usage"]["total_tokens"] == 6
    assert response.headers["x-toolgate-iterations"] == "2"
    assert "x-toolgate-stopped" not in response.headers  # no cap ended this run


async def test_metadata_tools_are_refused_in_process() -> None:
    tool_requests: list[httpx.Request] = []

    def tools(request: httpx.Request) -> httpx.Response:
        tool_requests.append(request)
        return httpx.Response(200)

    async with gateway(model, tools) as client:
        response = await client.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
            headers={"x-toolgate-tools": "metadata"},
        )
    assert response.status_code == 200
    assert "egress guard" in response.json()["choices"][0]["message"]["content"]
    assert tool_requests == []


async def test_wrong_methods_and_routes_use_the_envelope() -> None:
    async with gateway(model, model) as client:
        wrong_method = await client.get("/v1/chat/completions")
        unknown = await client.post("/v1/files", content=b"not json")
    assert wrong_method.status_code == 405
    assert_valid_error(wrong_method.json())
    assert unknown.status_code == 404
    assert_valid_error(unknown.json())


async def test_unexpected_errors_are_500_without_a_traceback() -> None:
    async def broken(request: Request, exchange: Exchange) -> Response:
        raise RuntimeError("secret internals")

    app = Starlette(routes=[Route("/boom", endpoint(broken))])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        response = await c.get("/boom")
    assert response.status_code == 500
    assert_valid_error(response.json())
    assert "secret internals" not in response.text
    assert response.headers["x-request-id"] in response.json()["error"]["message"]


def test_create_app_refuses_a_config_with_broken_references() -> None:
    broken = {**CONFIG, "models": [{"name": "m", "upstream": "nowhere"}]}
    with pytest.raises(ConfigError, match="unknown upstream 'nowhere'"):
        create_app(GatewayConfig.model_validate(broken))


class Counting:
    """Counts what the endpoint reports (an observer of its own)."""

    def __init__(self) -> None:
        self.begun = self.finished = self.abandoned = 0

    def begin(self, request: Request, exchange: Exchange, route: str) -> None:
        self.begun += 1

    def abandon(self, exchange: Exchange) -> None:
        self.abandoned += 1

    async def finish(self, exchange: Exchange, status: int) -> None:
        self.finished += 1


async def test_every_request_begun_is_finished_or_abandoned() -> None:
    import asyncio

    async def fine(request: Request, exchange: Exchange) -> Response:
        return Response(b"ok")

    async def cancelled(request: Request, exchange: Exchange) -> Response:
        raise asyncio.CancelledError

    counting = Counting()
    ok, gone = endpoint(fine, counting), endpoint(cancelled, counting)
    scope: dict[str, Any] = {"type": "http", "method": "GET", "path": "/", "headers": []}
    await ok(Request(scope))
    with pytest.raises(asyncio.CancelledError):
        await gone(Request(scope))
    assert (counting.begun, counting.finished, counting.abandoned) == (2, 1, 1)
