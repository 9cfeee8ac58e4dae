"""What the configuration counts as secret, and the two places it is redacted that are
not tool results: every response the gateway sends, and every log line."""

from __future__ import annotations

import json
import logging
import sys

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from gateway import GatewayConfig
from gateway.ops.logs import FIELDS, JsonFormatter
from gateway.ops.redaction import RedactionMiddleware, redactor_of, secrets_of
from tool_registry.redact import MARK, Redactor

KEY = "sk-upstream-0123456789"


def test_secrets_of_a_configuration() -> None:
    config = GatewayConfig.model_validate(
        {
            "server": {"metrics_token": "metrics-token-1234"},
            "store": {"url": "redis://:store-password-1@127.0.0.1:6379/0"},
            "upstreams": [
                {
                    "name": "up",
                    "base_url": "http://user:upstream-password@127.0.0.1:1/v1",
                    "api_key": KEY,
                    "headers": {"X-Org": "org-secret-header"},
                }
            ],
            "models": [{"name": "m", "upstream": "up"}],
            "tenants": [{"id": "a", "keys": ["sk-tenant-abcdefgh"]}],
            "tools": [
                {
                    "name": "t",
                    "description": "t",
                    "parameters": {"type": "object", "properties": {}},
                    "http": {
                        "url": "http://127.0.0.1:2/x?key=query-secret-1&page=1",
                        "headers": {
                            "Authorization": "Bearer tool-token-123",
                            "Content-Type": "application/json",
                        },
                    },
                }
            ],
        }
    )
    found = set(secrets_of(config))
    assert {
        "metrics-token-1234",
        "store-password-1",
        KEY,
        "upstream-password",
        "org-secret-header",
        "sk-tenant-abcdefgh",
        "query-secret-1",
        "tool-token-123",
    } <= found
    assert "application/json" not in found  # a descriptive header is no secret
    assert redactor_of(config).text(f"Bearer tool-token-123 {KEY}") == f"{MARK} {MARK}"


def _app() -> Starlette:
    async def whole(request: Request) -> Response:
        return Response(
            f'{{"error": "bad key {KEY}"}}',
            media_type="application/json",
            headers={"retry-after": KEY},
        )

    async def streamed(request: Request) -> StreamingResponse:
        async def pieces() -> object:
            for piece in ("data: a", KEY[:5], KEY[5:12], KEY[12:] + " b", "\n\n"):
                yield piece.encode()

        return StreamingResponse(pieces(), media_type="text/event-stream")  # type: ignore[arg-type]

    return Starlette(routes=[Route("/whole", whole), Route("/streamed", streamed)])


@pytest.mark.anyio
async def test_the_middleware_redacts_bodies_headers_and_split_streams() -> None:
    app = RedactionMiddleware(_app(), Redactor([KEY]))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        whole = await client.get("/whole")
        streamed = await client.get("/streamed")
    assert whole.json() == {"error": f"bad key {MARK}"}
    assert whole.headers["content-length"] == str(len(whole.content))
    assert whole.headers["retry-after"] == MARK
    assert streamed.text == f"data: a{MARK} b\n\n"


def test_log_lines_are_redacted_fields_and_tracebacks_too() -> None:
    formatter = JsonFormatter(Redactor([KEY]))
    try:
        raise ValueError(f"failed with {KEY}")
    except ValueError:
        exc_info = sys.exc_info()
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "key %s", (KEY,), exc_info)
    setattr(record, FIELDS, {"url": f"http://h/?key={KEY}"})
    text = formatter.format(record)
    assert KEY not in text
    line = json.loads(text)
    assert line["message"] == f"key {MARK}"
    assert line["url"] == f"http://h/?key={MARK}"
    assert f"failed with {MARK}" in line["exception"]
