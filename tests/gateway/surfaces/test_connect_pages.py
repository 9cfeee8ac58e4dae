"""The keyless connect pages under hostile input (DESIGN.md §18): whatever a browser
brings to a link or to the provider's callback — a forged ticket, any ``state``,
``code``, ``error`` or ``iss``, markup, control characters, absurd lengths — is a page
of the gateway's own, escaped, with no stack trace, nothing kept and nothing sent to
the provider. In-process: ``httpx.ASGITransport`` in front, a provider that records
behind."""

from __future__ import annotations

import asyncio
import base64
import os
from typing import Any
from urllib.parse import quote

import httpx
from hypothesis import given
from hypothesis import strategies as st

from gateway import GatewayConfig, create_app

CONFIG: dict[str, Any] = {
    "upstreams": [{"name": "up", "base_url": "http://upstream.test/v1", "max_retries": 0}],
    "models": [{"name": "m", "upstream": "up"}],
    "server": {"public_url": "https://gw.example"},
    "grants": {
        "keys": [{"id": "k", "key": base64.b64encode(os.urandom(32)).decode()}],
        "pages_per_minute": 10_000,
    },
    "connections": [
        {
            "name": "github",
            "authorize_url": "https://idp.test/authorize",
            "token_url": "https://idp.test/token",
            "client_id": "c",
        }
    ],
}

hostile = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=300
) | st.sampled_from(
    ["<script>alert(1)</script>", "\r\nSet-Cookie: x=1", "A" * 5000, "%00", "../../etc/passwd"]
)


def test_whatever_comes_to_the_pages_is_an_escaped_page_and_nothing_more() -> None:
    sent: list[httpx.Request] = []

    def provider(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"access_token": "at", "token_type": "Bearer"})

    app = create_app(
        GatewayConfig.model_validate(CONFIG),
        upstream_transport=httpx.MockTransport(lambda r: httpx.Response(500)),
        tool_transport=httpx.MockTransport(provider),
    )
    loop = asyncio.new_event_loop()
    lifespan = app.router.lifespan_context(app)
    loop.run_until_complete(lifespan.__aenter__())
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw")

    def check(answer: httpx.Response, given_text: str) -> None:
        assert answer.status_code in (400, 404), answer.status_code
        assert answer.headers["content-type"].startswith("text/html")
        assert answer.headers["cache-control"] == "no-store"
        assert "Traceback" not in answer.text
        if "<" in given_text:
            assert "<script>alert" not in answer.text

    @given(state=hostile, code=hostile, error=hostile, iss=hostile)
    def callback(state: str, code: str, error: str, iss: str) -> None:
        query = {"state": state, "code": code, "error": error, "iss": iss}
        answer = loop.run_until_complete(client.get("/v1/toolgate/connect/callback", params=query))
        check(answer, error + state + code + iss)

    @given(ticket=hostile)
    def link(ticket: str) -> None:
        answer = loop.run_until_complete(
            client.get(f"/v1/toolgate/connect/{quote(ticket, safe='')}")
        )
        if not answer.headers.get("content-type", "").startswith("text/html"):
            assert answer.status_code == 404  # not the route's path (a slash): the router's
            return
        check(answer, ticket)

    try:
        callback()
        link()
    finally:
        loop.run_until_complete(client.aclose())
        loop.run_until_complete(lifespan.__aexit__(None, None, None))
        loop.close()
    assert sent == []  # no state was ever one the gateway gave: the provider heard nothing
