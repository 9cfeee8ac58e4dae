"""An MCP server that requires authorization, used per user through the gateway
(docs/design.md §18, the MCP specification's authorization): the server (the official SDK's
auth support) names its authorization server in its protected resource metadata; the
gateway finds that server's metadata, registers itself there (dynamic client
registration), and sends the user's browser to its consent page with PKCE and the
server as the resource indicator. The tokens it gets are JWTs for that server only;
each user's calls go out in a session of their own, with their own token.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from tests.browser.signed_in import APP, SignedIn, said
from tests.support.mcp_servers import authorized_server
from tests.support.oidc import Idp
from tests.support.scripted import Harness, Model, asks, call, config, says
from tests.support.servers import free_port, until


def offered_first(body: dict[str, Any]) -> dict[str, Any]:
    """Calls the server's tool where it is offered, else the tool that connects."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return says(f"read: {last['content']}")
    names = [t["function"]["name"] for t in body.get("tools", [])]
    return asks(call("my_tickets" if "my_tickets" in names else "connect_desk", {}, "c_1"))


class Stack(SignedIn):
    def __init__(self, harness: Harness) -> None:
        super().__init__(harness)
        mcp_port = free_port()
        self.resource = f"http://127.0.0.1:{mcp_port}/mcp"
        self.idp = Idp(
            [self.app_client()],
            resources=[{"url": self.resource, "scope": "tickets:read"}],
        )
        harness.on_close(self.idp.close)
        server, self.verifier = authorized_server(self.idp.issuer, self.resource)
        harness.serve(server.streamable_http_app(), port=mcp_port)
        self.model = Model(offered_first)
        model_url = harness.serve(self.model.recorder).url
        port = free_port()
        self.public = f"http://127.0.0.1:{port}"
        data = config(model_url, [])
        data["server"] = {"public_url": self.public}
        key = base64.b64encode(os.urandom(32)).decode()
        data["grants"] = {"keys": [{"id": "k1", "key": key}]}
        data["connections"] = [{"name": "desk", "type": "mcp", "url": self.resource}]
        data["mcp"] = [{"name": "desk", "url": self.resource, "auth": {"connection": "desk"}}]
        data["tenants"][0]["tools"] = ["*"]
        data["tenants"][0]["users"] = self.users()
        self.gateway = harness.gateway(data, port=port)


def eventually(ask: Callable[[], httpx.Response], text: str) -> httpx.Response:
    """The answer once it holds ``text`` (a source's new tools are in use within a
    moment: the snapshot is rebuilt off the event loop)."""
    return until(ask, lambda answer: text in said(answer), 10) or ask()


def test_an_mcp_server_that_requires_authorization_is_used_as_each_user(
    harness: Harness,
) -> None:
    stack = Stack(harness)
    stack.sign_in("alice")
    first = stack.ask("alice")  # no user has connected: the server offers its connect tool
    link = first.headers["x-toolgate-connect"]
    assert stack.verifier.verified == []  # nothing reached the server without a token

    page = stack.browser.go("alice", link)
    assert "desk is connected" in page.content()
    # The browser went to the authorization server the MCP server named, with PKCE and
    # the server as the resource; the client was registered there by the gateway.
    authorize = [u for u in stack.browser.visited if u.startswith(f"{stack.idp.issuer}/auth?")]
    query = parse_qs(urlsplit(authorize[-1]).query)
    assert query["resource"] == [stack.resource]
    assert query["code_challenge_method"] == ["S256"]
    # As its resource metadata lists, and openid: this provider also names the tenant's
    # users, so the grant is kept only for the link's user, whom its ID token names.
    assert query["scope"] == ["tickets:read openid"]
    assert query["client_id"] != [APP[0]]  # the client the gateway registered

    connected = stack.ask("alice")  # the connect tool opens alice's session and lists
    assert "offered from the next request" in said(connected)
    assert set(stack.verifier.verified) == {"alice"}  # every request of her session
    third = eventually(lambda: stack.ask("alice"), "T-7")  # once the new tools are in use
    assert "T-7 of alice" in said(third)
    assert set(stack.verifier.verified) == {"alice"}

    # Bob, signed in as himself, is not served with alice's session or token.
    stack.sign_in("bob")
    bobs = stack.ask("bob")
    assert "x-toolgate-connect" in bobs.headers
    assert "T-7 of" not in said(bobs)
    assert set(stack.verifier.verified) == {"alice"}
    stack.browser.go("bob", bobs.headers["x-toolgate-connect"])
    assert "T-7 of bob" in said(stack.ask("bob"))
    assert "T-7 of alice" in said(stack.ask("alice"))
