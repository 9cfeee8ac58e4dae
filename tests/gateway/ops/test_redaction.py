"""What the configuration counts as secret, and the two places it is redacted that are
not tool results: every response the gateway sends, and every log line."""

from __future__ import annotations

import json
import logging
import sys

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from gateway import GatewayConfig
from gateway.ops.logs import FIELDS, JsonFormatter
from gateway.ops.redaction import (
    LINK_GIVEN,
    RedactionMiddleware,
    forget_links,
    forget_links_text,
    redactor_of,
    secrets_of,
)
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


# Connect links (docs/security.md, "A connect link is its user's"): kept nowhere.
TICKET = "Zk3v9Qm_2bXw-Lr8TqYp1sNc4HdJ6aUe0oVfGiKyMnA"  # as secrets.token_urlsafe(32) makes
LINKS = [
    f"https://gw.example.com/v1/toolgate/connect/{TICKET}",
    f"http://127.0.0.1:8080/v1/toolgate/connect/{TICKET}",
    f"/v1/toolgate/connect/{TICKET}",
]


@pytest.mark.parametrize("link", LINKS)
def test_a_link_is_forgotten_in_text_and_bytes(link: str) -> None:
    text = f'Ask the user to connect github at {link} and then "to ask again".'
    assert forget_links_text(text) == (
        f'Ask the user to connect github at {LINK_GIVEN} and then "to ask again".'
    )
    assert (
        forget_links(json.dumps({"said": text}).encode())
        == json.dumps({"said": forget_links_text(text)}).encode()
    )


def test_what_holds_no_link_is_left_as_it_is() -> None:
    data = b'{"callback": "/v1/toolgate/connect/callback?state=abc", "x": 1}'
    assert forget_links(data) is data
    assert forget_links_text("/v1/toolgate/connect/callback") == "/v1/toolgate/connect/callback"


@given(before=st.text(max_size=200), after=st.text(max_size=200), link=st.sampled_from(LINKS))
def test_no_text_around_a_link_keeps_its_ticket(before: str, after: str, link: str) -> None:
    assert TICKET not in forget_links_text(before + link + after)
    assert TICKET.encode() not in forget_links((before + link + after).encode())


def test_a_log_line_forgets_links_in_its_message_and_fields() -> None:
    record = logging.LogRecord("gateway.x", logging.WARNING, "x", 1, LINKS[0], None, None)
    setattr(record, FIELDS, {"said": LINKS[1]})
    line = JsonFormatter().format(record)
    assert TICKET not in line
    assert line.count(LINK_GIVEN) == 2
