"""Connections against a real, certified OpenID provider (``oidc-provider`` on Node),
its real login and consent pages driven in Chromium (docs/design.md §18, issue 37).

The user signs in to the application at the provider (the ID token the application
gets is the end-user token the gateway verifies, against the provider's keys found by
its discovery document). A tool that calls as the user gets a link; the user opens it
in the browser, consents at the provider's page, and the gateway keeps the grant. The
ticket service is a resource server that asks the provider whose each token is
(introspection): the tests read what the provider says, not what the gateway says.
"""

from __future__ import annotations

import base64
import json
import os
import time
from typing import Any

import httpx
import pytest

from tests.browser.signed_in import SignedIn, said
from tests.support.oidc import Idp
from tests.support.recorder import Answer, Received, Recorder
from tests.support.scripted import MODEL, Harness, Model, asks, call, config, says
from tests.support.servers import free_port

TOOLGATE = ("toolgate", "toolgate-secret-CANARY-0037-0037-0037")
API = ("tickets-api", "api-secret-CANARY-0037-0037-0037-0037")
EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"


class Tickets:
    """A resource server: every bearer token it gets is introspected at the provider;
    it answers whose tickets it served (and who the token says the client is)."""

    def __init__(self, harness: Harness) -> None:
        self.idp: Idp | None = None
        self.recorder = Recorder(self._answer)
        self.url = harness.serve(self.recorder).url
        self.seen: list[dict[str, Any]] = []  # the provider's word on each token

    def _answer(self, hit: Received) -> Answer:
        assert self.idp is not None
        token = hit.headers.get("authorization", "").removeprefix("Bearer ")
        said = self.idp.introspect(token, API) if token else {"active": False}
        self.seen.append({**said, "token": token})
        if not said.get("active"):
            return Answer(401, b'{"error": "invalid_token"}')
        body = {"tickets": [f"T-1 of {said['sub']}"], "client": said.get("client_id")}
        return Answer(body=json.dumps(body).encode())


def calling(tool: str) -> Any:
    def script(body: dict[str, Any]) -> dict[str, Any]:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return says(f"read: {last['content']}")
        return asks(call(tool, {}, "c_1"))

    return script


class Stack(SignedIn):
    def __init__(self, harness: Harness, tool: str = "my_tickets", link_ttl_s: float = 600) -> None:
        super().__init__(harness)
        self.tickets = Tickets(harness)
        port = free_port()
        self.public = f"http://127.0.0.1:{port}"
        callback = f"{self.public}/v1/toolgate/connect/callback"
        self.idp = Idp(
            [
                self.app_client(),
                {
                    "client_id": TOOLGATE[0],
                    "client_secret": TOOLGATE[1],
                    "redirect_uris": [callback],
                    "grant_types": ["authorization_code", "refresh_token", EXCHANGE],
                    "response_types": ["code"],
                    "scope": "openid offline_access tickets",
                },
                {
                    "client_id": API[0],
                    "client_secret": API[1],
                    "redirect_uris": [],
                    "grant_types": [],
                    "response_types": [],
                },
            ]
        )
        harness.on_close(self.idp.close)
        self.tickets.idp = self.idp
        self.model = Model(calling(tool))
        model_url = harness.serve(self.model.recorder).url
        data = config(model_url, [])
        data["server"] = {"public_url": self.public}
        key = base64.b64encode(os.urandom(32)).decode()
        data["grants"] = {"keys": [{"id": "k1", "key": key}], "link_ttl_s": link_ttl_s}
        data["connections"] = [
            {  # the endpoints from the provider's discovery document
                "name": "tickets",
                "issuer": self.idp.issuer,
                "client_id": TOOLGATE[0],
                "client_secret": TOOLGATE[1],
                "scopes": ["openid", "tickets"],
                "refresh_margin_s": 3600,  # every use refreshes: tokens rotate
            },
            {
                "name": "tickets-exchanged",
                "type": "token_exchange",
                "subject_token_type": "id_token",  # the provider's own ID token
                "token_url": f"{self.idp.issuer}/token",
                "client_id": TOOLGATE[0],
                "client_secret": TOOLGATE[1],
                "scopes": ["tickets"],
            },
        ]
        data["tools"] = [
            {
                "name": name,
                "description": "The user's own tickets.",
                "http": {"url": f"{self.tickets.url}/tickets"},
                "auth": {"connection": connection},
            }
            for name, connection in (
                ("my_tickets", "tickets"),
                ("my_tickets_exchanged", "tickets-exchanged"),
            )
        ]
        data["tenants"][0]["tools"] = ["*"]
        data["tenants"][0]["users"] = self.users()
        self.gateway = harness.gateway(data, port=port)


@pytest.fixture
def stack(harness: Harness) -> Stack:
    return Stack(harness)


def test_a_user_connects_at_the_provider_and_tools_act_as_that_user(stack: Stack) -> None:
    stack.sign_in("alice")
    first = stack.ask("alice")
    link = first.headers["x-toolgate-connect"]
    assert link in said(first)  # the model was told where the user connects
    assert stack.tickets.recorder.hits == []  # nothing called without the user's token

    page = stack.browser.go("alice", link)  # consent at the provider's own page
    assert page.url.startswith(f"{stack.public}/v1/toolgate/connect/callback?")
    assert "tickets is connected" in page.content()
    [connection] = stack.connections("alice")
    assert connection["connection"] == "tickets"
    assert "tickets" in connection["scopes"]

    second = stack.ask("alice")
    assert "x-toolgate-connect" not in second.headers
    assert "T-1 of alice" in said(second)
    [seen] = stack.tickets.seen
    assert seen["active"] is True
    assert seen["sub"] == "alice"
    assert seen["client_id"] == TOOLGATE[0]
    # The token went to the tool only: not to the model, not to the client.
    assert seen["token"] not in json.dumps(stack.model.requests)
    assert seen["token"] not in second.text

    # Every use refreshes (refresh_margin_s): a new access token each time, alice's.
    stack.ask("alice")
    assert stack.tickets.seen[1]["sub"] == "alice"
    assert stack.tickets.seen[1]["token"] != seen["token"]

    # Bob signs in as himself: he gets a link, never alice's token.
    stack.sign_in("bob")
    bobs = stack.ask("bob")
    assert "x-toolgate-connect" in bobs.headers
    assert len(stack.tickets.seen) == 2
    assert stack.connections("bob") == []

    # Revoked: the provider revokes the grant (its tokens are no longer active), the
    # gateway forgets it, and the next call asks for a link again.
    last = stack.tickets.seen[-1]["token"]
    revoked = httpx.delete(
        f"{stack.gateway.url}/v1/toolgate/connections/tickets", headers=stack.headers("alice")
    )
    assert revoked.json()["revoked"] is True
    assert stack.idp.introspect(last, API) == {"active": False}
    assert stack.connections("alice") == []
    assert "x-toolgate-connect" in stack.ask("alice").headers
    # The provider's own login and consent pages were where the user said yes.
    interactions = [
        u for u in stack.browser.visited if u.startswith(f"{stack.idp.issuer}/interaction/")
    ]
    assert len(interactions) >= 3  # alice's sign-in and consent, and bob's


def test_a_replayed_callback_and_a_used_link_are_refused(stack: Stack) -> None:
    stack.sign_in("alice")
    link = stack.ask("alice").headers["x-toolgate-connect"]
    page = stack.browser.go("alice", link)
    assert "tickets is connected" in page.content()
    callback = page.url
    replayed = httpx.get(callback)  # the same state and code again
    assert replayed.status_code == 400
    assert "cannot be finished" in replayed.text
    again = stack.browser.page("alice").goto(link)  # the ticket was used up
    assert again is not None
    assert again.status == 404
    # A forged ticket.
    forged = httpx.get(link.rsplit("/", 1)[0] + "/" + "A" * 43)
    assert forged.status_code == 404
    assert len(stack.connections("alice")) == 1


def test_an_expired_link_is_refused(harness: Harness) -> None:
    stack = Stack(harness, link_ttl_s=1)
    stack.sign_in("alice")
    link = stack.ask("alice").headers["x-toolgate-connect"]
    time.sleep(1.5)
    opened = stack.browser.page("alice").goto(link)
    assert opened is not None
    assert opened.status == 404
    assert "does not work" in stack.browser.page("alice").content()
    assert stack.connections("alice") == []


def test_a_token_exchange_at_the_provider_acts_as_the_user(harness: Harness) -> None:
    stack = Stack(harness, tool="my_tickets_exchanged")
    stack.sign_in("alice")
    stack.sign_in("bob")
    assert "T-1 of alice" in said(stack.ask("alice"))
    assert "T-1 of bob" in said(stack.ask("bob"))
    assert [s["sub"] for s in stack.tickets.seen] == ["alice", "bob"]
    assert {s["client_id"] for s in stack.tickets.seen} == {TOOLGATE[0]}
    # An end-user token that was altered is refused before anything is exchanged.
    forged = stack.id_tokens["alice"][:-4] + "AAAA"
    stack.id_tokens["mallory"] = forged
    refused = httpx.post(
        f"{stack.gateway.url}/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
        headers=stack.headers("mallory"),
    )
    assert refused.status_code == 401  # the gateway verifies the user token first
    assert len(stack.tickets.seen) == 2


def test_a_provider_page_sent_to_another_user_connects_no_one(stack: Stack) -> None:
    """Mallory opens her own link, stops at the provider's sign-in page, and sends its
    address to alice. Alice signs in and consents there as herself; the provider sends
    her browser back to the gateway, which refuses: the round trip did not begin in
    that browser. Neither holds a grant."""
    stack.sign_in("mallory")
    stack.sign_in("alice")
    link = stack.ask("mallory").headers["x-toolgate-connect"]
    mallorys = stack.browser.page("mallory-elsewhere")  # no provider session: stops there
    mallorys.goto(link)
    sent = [u for u in stack.browser.visited if u.startswith(f"{stack.idp.issuer}/auth?")][-1]
    page = stack.browser.go("alice", sent)
    assert page.url.startswith(f"{stack.public}/v1/toolgate/connect/callback?")
    assert "did not start in this browser" in page.content()
    assert stack.connections("mallory") == []
    assert stack.connections("alice") == []
