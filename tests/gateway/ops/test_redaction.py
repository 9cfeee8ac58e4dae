"""What the configuration counts as secret, and the two places it is redacted that are
not tool results: every response the gateway sends, and every log line."""

from __future__ import annotations

import base64
import json
import logging
import re
import sys
from collections.abc import Iterator
from typing import Any, get_args

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, SecretStr
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
from tool_registry.redact import MARK, Redactor, display_url

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


# Every configured secret is in the one list every sink reads (``secrets_of``). The
# configuration below sets every secret-typed field the models have (the first test
# fails when a model gains one it does not set), and the others check that each of
# them, each header sent and each secret part of each URL is in the list.
WEBHOOK_SECRET = "whsec_" + base64.b64encode(b"w" * 32).decode()
GRANT_KEY = base64.b64encode(b"g" * 32).decode()
EVERY_SECRET: dict[str, Any] = {
    "server": {
        "metrics_token": "metrics-CANARY-01",
        "admin_key": "admin-CANARY-02",
        "public_url": "https://gw.example.com",
    },
    "store": {"url": "redis://:store-CANARY-03@127.0.0.1:6379/0"},
    "otel": {"headers": {"x-collector-key": "otel-CANARY-04"}},
    "upstreams": [
        {
            "name": "up",
            "base_url": "http://u:upstream-CANARY-05@127.0.0.1:1/v1?k=upq-CANARY-06",
            "api_key": "sk-CANARY-07",
            "headers": {"X-Org": "org-CANARY-08"},
        }
    ],
    "models": [{"name": "m", "upstream": "up"}],
    "tools": [
        {
            "name": "t",
            "description": "t",
            "parameters": {"type": "object", "properties": {}},
            "http": {
                "url": "http://127.0.0.1:2/x?key=toolq-CANARY-09",
                "headers": {"Authorization": "Bearer tool-CANARY-10"},
            },
        }
    ],
    "openapi": [
        {
            "spec": "http://doc:spec-CANARY-11@127.0.0.1:3/doc.json?key=specq-CANARY-12",
            "base_url": "http://127.0.0.1:3/api?k=baseq-CANARY-13",
            "auth": {"api_key": "oa-CANARY-14"},
            "headers": {"X-Api": "oah-CANARY-15"},
        }
    ],
    "mcp": [
        {
            "name": "desk",
            "url": "http://127.0.0.1:4/mcp?token=mcpq-CANARY-16",
            "headers": {"Authorization": "Bearer mcph-CANARY-17"},
        }
    ],
    "grants": {"keys": [{"id": "k1", "key": GRANT_KEY}]},
    "connections": [
        {
            "name": "gh",
            "authorize_url": "https://idp.example.com/authorize?tenant=authq-CANARY-18",
            "token_url": "https://idp.example.com/token",
            "client_id": "app",
            "client_secret": "oauth-CANARY-19",
        },
        {
            "name": "desk",
            "type": "mcp",
            "url": "https://mcp.example.com/mcp",
            "client_id": "app",
            "client_secret": "mcpc-CANARY-20",
        },
        {
            "name": "x",
            "type": "token_exchange",
            "token_url": "https://sts.example.com/token",
            "client_id": "app",
            "client_secret": "sts-CANARY-21",
        },
    ],
    "policy": {
        "approvals": {
            "admin_keys": ["approver-CANARY-22"],
            "webhook": "https://hooks.example.com/x?sig=hookq-CANARY-23",
            "webhook_secret": WEBHOOK_SECRET,
        },
        "guardrails": {
            "rules": [
                {
                    "name": "corp",
                    "kind": "http",
                    "url": "https://guard.example.com/check?key=guardq-CANARY-28",
                    "secret": "whsec_" + base64.b64encode(b"g" * 32).decode(),
                }
            ]
        },
    },
    "tenants": [
        {
            "id": "a",
            "keys": ["sk-tenant-CANARY-24"],
            "tools": ["*"],
            "users": {
                "jwt": {
                    "issuer": "https://idp.example.com",
                    "audience": "app",
                    "jwks_url": "https://idp.example.com/jwks?key=jwksq-CANARY-25",
                }
            },
            "policy": {
                "approvals": {
                    "admin_keys": ["approver-CANARY-26"],
                    "webhook": "https://hooks.example.com/a?sig=hookq-CANARY-27",
                    "webhook_secret": "whsec_" + base64.b64encode(b"v" * 32).decode(),
                },
                "guardrails": {
                    "rules": [
                        {
                            "name": "own",
                            "kind": "http",
                            "url": "https://guard.example.com/a?key=guardq-CANARY-29",
                            "secret": "whsec_" + base64.b64encode(b"h" * 32).decode(),
                        }
                    ]
                },
            },
        }
    ],
}


def _types_in(annotation: Any) -> Iterator[Any]:
    """The classes an annotation names, through unions, lists, dicts and ``Annotated``."""
    arguments = get_args(annotation)
    if not arguments:
        yield annotation
    for argument in arguments:
        yield from _types_in(argument)


def _secret_fields(model: type[BaseModel], path: str = "") -> set[str]:
    """Every field of ``model`` (and the models under it) typed ``SecretStr``."""
    found: set[str] = set()
    for name, field in model.model_fields.items():
        for kind in _types_in(field.annotation):
            if kind is SecretStr:
                found.add(path + name)
            elif isinstance(kind, type) and issubclass(kind, BaseModel) and kind is not model:
                found |= _secret_fields(kind, f"{path}{name}.")
    return found


def _secret_values(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """Every ``SecretStr`` a configuration holds, with the field it is in."""
    if isinstance(value, SecretStr):
        yield path.rstrip("."), value.get_secret_value()
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _secret_values(getattr(value, name), f"{path}{name}.")
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _secret_values(item, path)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _secret_values(item, path)


def test_the_configuration_sets_every_secret_typed_field_of_the_models() -> None:
    config = GatewayConfig.model_validate(EVERY_SECRET)
    assert {path for path, _ in _secret_values(config)} == _secret_fields(GatewayConfig)


def test_every_secret_of_the_configuration_is_in_the_one_list() -> None:
    config = GatewayConfig.model_validate(EVERY_SECRET)
    found = set(secrets_of(config))
    for path, secret in _secret_values(config):
        assert secret in found, f"{path} is not in secrets_of"
    canaries = set(re.findall(r"[a-z-]+-CANARY-\d+", json.dumps(EVERY_SECRET)))
    assert len(canaries) == 29
    assert canaries <= found  # headers sent, and URLs' passwords and query values


def test_a_source_is_shown_by_a_label_without_its_secrets() -> None:
    config = GatewayConfig.model_validate(EVERY_SECRET)
    [source] = config.openapi
    assert source.label == "http://[redacted]@127.0.0.1:3/doc.json?key=[redacted]"
    assert "CANARY" not in display_url(source.spec)
    assert display_url("config/tools/petstore.yaml") == "config/tools/petstore.yaml"
