"""The keyless connect pages under hostile input (docs/design.md §18): whatever a browser
brings to a link or to the provider's callback — a forged ticket, any ``state``,
``code``, ``error`` or ``iss``, markup, control characters, absurd lengths — is a page
of the gateway's own, escaped, with no stack trace, nothing kept and nothing sent to
the provider. In-process: ``httpx.ASGITransport`` in front, a provider that records
behind."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import socket
import threading
from typing import Any
from urllib.parse import quote

import httpx
from hypothesis import given
from hypothesis import strategies as st
from starlette.routing import Route

from gateway import GatewayConfig, create_app
from gateway.surfaces.http import BOUNDARY

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


class HungStore:
    """A Redis that takes connections and never answers (a store that hangs)."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"redis://127.0.0.1:{self._listener.getsockname()[1]}/0"
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                self._held.append(self._listener.accept()[0])

    def close(self) -> None:
        self._listener.close()
        for held in self._held:
            held.close()


def test_with_the_store_hung_the_pages_say_so_and_stay_limited() -> None:
    """The keyless pages while the store hangs (and for the second after each failure,
    while it is skipped): a page saying to try again (503), never a 500 or a
    traceback; and the budget of ``pages_per_minute`` still counted, in memory."""
    hung = HungStore()
    config = {**CONFIG, "store": {"url": hung.url, "timeout_s": 0.05}}
    config["grants"] = {**CONFIG["grants"], "pages_per_minute": 20}
    app = create_app(
        GatewayConfig.model_validate(config),
        upstream_transport=httpx.MockTransport(lambda r: httpx.Response(500)),
        tool_transport=httpx.MockTransport(lambda r: httpx.Response(500)),
    )
    loop = asyncio.new_event_loop()
    lifespan = app.router.lifespan_context(app)
    loop.run_until_complete(lifespan.__aenter__())
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw")
    statuses: list[int] = []

    @given(path=st.sampled_from(["callback", "ticket"]), value=hostile)
    def visit(path: str, value: str) -> None:
        if path == "callback":
            ask = client.get("/v1/toolgate/connect/callback", params={"state": value, "code": "c"})
        else:
            ask = client.get(f"/v1/toolgate/connect/{quote(value, safe='') or 'x'}")
        answer = loop.run_until_complete(ask)
        if not answer.headers.get("content-type", "").startswith("text/html"):
            assert answer.status_code == 404  # not the route's path (a slash): the router's
            return
        statuses.append(answer.status_code)
        assert answer.status_code in (400, 404, 429, 503), answer.text
        assert "Traceback" not in answer.text
        if answer.status_code in (429, 503):
            assert int(answer.headers["retry-after"]) >= 1

    try:
        visit()
    finally:
        loop.run_until_complete(client.aclose())
        loop.run_until_complete(lifespan.__aexit__(None, None, None))
        loop.close()
        hung.close()
    assert 503 in statuses
    assert 429 in statuses  # past 20 visits a minute from one address, store or not
    assert statuses.count(503) <= 20


def test_every_route_stands_behind_the_one_error_boundary() -> None:
    """Every route's endpoint is one ``http.endpoint`` made (or, for the MCP endpoint,
    an ASGI route, its own ``__call__``): a route added without it fails here."""
    config = {**CONFIG, "console": {"enabled": True}, "server": {**CONFIG["server"]}}
    app = create_app(GatewayConfig.model_validate(config))
    routes = [route for route in app.router.routes if isinstance(route, Route)]
    assert len(routes) > 40
    unguarded = [route.path for route in routes if not getattr(route.endpoint, BOUNDARY, False)]
    assert unguarded == []
