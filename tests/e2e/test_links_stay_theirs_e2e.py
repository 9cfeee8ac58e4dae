"""A connect link is its user's (docs/security.md, "A connect link is its user's").

The attack these tests replay: with recordings on, user A read the tenant's recordings
(or a trace) with the tenant's key and their own token, found user B's pending connect
link in B's recorded conversation, opened it and signed in as themselves at the
provider — and B's next tool call ran with A's token. Now:

(a) what a user's request keeps (its trace and recording) is read by that user alone
    through the tenant's routes;
(b) no link is kept anywhere (trace, recording, stored response, log line, span): what
    is kept says a link was given;
(c) where the connection's provider is also the tenant's identity provider, a grant is
    kept only for the subject the link was made for.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import jwt
import pytest

from gateway.ops.logs import JsonFormatter
from gateway.ops.redaction import LINK_GIVEN
from tests.e2e.test_connect_e2e import RecordedStack, Stack
from tests.e2e.test_users_e2e import Provider
from tests.support.recorder import Answer, Received
from tests.support.scripted import MODEL, TENANT_KEY, Harness


class CapturingStack(RecordedStack):
    """Recording every request, spans with their content, to a collector."""

    def _data(self, data: dict[str, Any]) -> dict[str, Any]:
        data = super()._data(data)
        data["otel"]["capture_content"] = True
        return data


def _ticket(link: str) -> str:
    return link.rsplit("/", 1)[1]


def test_a_users_trace_and_recording_are_theirs_and_keep_no_link(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    stack = CapturingStack(harness)
    bobs = stack.ask("bob")
    link = bobs.headers["x-toolgate-connect"]
    ticket = _ticket(link)
    assert link in bobs.json()["choices"][0]["message"]["content"]  # bob was told
    request_id = bobs.headers["x-request-id"]
    trace_url = f"{stack.gateway.url}/v1/toolgate/traces/{request_id}"
    recordings_url = f"{stack.gateway.url}/v1/toolgate/recordings"

    # (a) alice, with the tenant's key and her own token, reads neither; nor does the
    # tenant's key with no user (a 401 where, as here, the tenant requires one).
    assert httpx.get(trace_url, headers=stack.headers("alice")).status_code == 404
    keyed = httpx.get(trace_url, headers={"authorization": f"Bearer {TENANT_KEY}"})
    assert keyed.status_code in (401, 404)
    assert ticket not in keyed.text
    alices = httpx.get(recordings_url, headers=stack.headers("alice"))
    assert alices.status_code == 200
    assert request_id not in alices.text
    assert ticket not in alices.text

    # bob reads his own: the link is not in it, what is kept says one was given.
    trace = httpx.get(trace_url, headers=stack.headers("bob"))
    assert trace.status_code == 200
    assert trace.json()["recording"]["kept"] is True
    bobs_recordings = httpx.get(recordings_url, headers=stack.headers("bob")).text
    assert request_id in bobs_recordings
    for text in (trace.text, bobs_recordings):
        assert ticket not in text
        assert LINK_GIVEN in text

    # (b) nor in the log or the spans, whose content is captured.
    stack.collector.tool_span_of(bobs.headers["x-toolgate-trace-id"])
    spans = json.dumps([[s.name, s.attributes, s.events] for s in stack.collector.spans])
    assert LINK_GIVEN in spans  # the tool's result was captured, without the link
    assert ticket not in spans
    # The gateway's own lines as it writes them (the test's client logs here too).
    written = [JsonFormatter().format(r) for r in caplog.records if r.name.startswith("gateway")]
    assert any("request_id" in line for line in written)  # its lines were read
    assert ticket not in "\n".join(written)

    # The link itself still works, for bob: only what was kept forgot it.
    assert "github is connected" in stack.browse(link).text
    assert [c["connection"] for c in stack.connections("bob")] == ["github"]
    assert stack.connections("alice") == []


def test_a_stored_response_keeps_no_link(harness: Harness) -> None:
    stack = CapturingStack(harness)
    body = {"model": MODEL, "input": "my repos?"}
    url = f"{stack.gateway.url}/v1/responses"
    answer = httpx.post(url, json=body, headers=stack.headers("bob"))
    assert answer.status_code == 200, answer.text
    ticket = _ticket(answer.headers["x-toolgate-connect"])
    assert ticket in answer.json()["output"][-1]["content"][0]["text"]  # as answered
    kept = httpx.get(f"{url}/{answer.json()['id']}", headers=stack.headers("bob"))
    assert kept.status_code == 200
    assert ticket not in kept.text
    assert LINK_GIVEN in kept.json()["output"][-1]["content"][0]["text"]
    # Continued: the model reads what was kept, not the link.
    follow = {**body, "input": "and now?", "previous_response_id": answer.json()["id"]}
    assert httpx.post(url, json=follow, headers=stack.headers("bob")).status_code == 200
    assert ticket not in json.dumps(stack.model.requests[-1])


class SameProvider(Provider):
    """The tenant's identity provider that is also the connection's OAuth server: its
    token endpoint answers an ID token for whoever signed in (``signed_in``)."""

    def __init__(self, harness: Harness) -> None:
        self.signed_in = "bob"
        self.id_token = True  # False: an answer without one
        self.codes: dict[str, str] = {}  # code → challenge
        self.nonces: dict[str, str] = {}  # code → the nonce its authorization sent
        self.scopes: list[str] = []  # what each authorization asked for
        super().__init__(harness)

    def _answer(self, hit: Received) -> Answer:
        parts = urlsplit(hit.raw_path)
        if parts.path == "/.well-known/openid-configuration":
            document = {
                "issuer": self.issuer,
                "jwks_uri": self.jwks_uri,
                "authorization_endpoint": f"{self.issuer}/authorize",
                "token_endpoint": f"{self.issuer}/token",
            }
            return Answer(body=json.dumps(document).encode())
        if parts.path == "/authorize":
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            self.scopes.append(query.get("scope", ""))
            code = base64.urlsafe_b64encode(os.urandom(12)).decode()
            self.codes[code] = query["code_challenge"]
            self.nonces[code] = query["nonce"]  # an OpenID provider binds its ID token to it
            back = f"{query['redirect_uri']}?{urlencode({'code': code, 'state': query['state']})}"
            return Answer(302, b"", [("location", back)])
        if parts.path == "/token":
            form = {k: v[0] for k, v in parse_qs(hit.body.decode()).items()}
            verifier = hashlib.sha256(form["code_verifier"].encode()).digest()
            challenge = base64.urlsafe_b64encode(verifier).rstrip(b"=").decode()
            nonce = self.nonces.pop(form["code"], None)
            if self.codes.pop(form["code"], None) != challenge:
                return Answer(400, b'{"error": "invalid_grant"}')
            answer: dict[str, Any] = {
                "access_token": f"at-{self.signed_in}",
                "token_type": "Bearer",
                "expires_in": 600,
            }
            if self.id_token:
                now = int(time.time())
                claims = {
                    "iss": self.issuer,
                    "aud": "toolgate-app",
                    "sub": self.signed_in,
                    "iat": now,
                    "exp": now + 300,
                    "nonce": nonce,
                }
                answer["id_token"] = jwt.encode(
                    claims, self.private, "RS256", headers={"kid": self.kid}
                )
            return Answer(body=json.dumps(answer).encode())
        return super()._answer(hit)


class SameIssuerStack(Stack):
    """``calendar`` is a connection at the provider that names the tenant's users."""

    def __init__(self, harness: Harness) -> None:
        self.same = SameProvider(harness)
        super().__init__(harness)

    def _data(self, data: dict[str, Any]) -> dict[str, Any]:
        data["connections"].append(
            {
                "name": "calendar",
                "issuer": self.same.issuer,
                "client_id": "toolgate-app",
                "client_secret": "calendar-secret-CANARY",
                "scopes": ["calendar"],
            }
        )
        data["tenants"][0]["users"]["jwt"]["issuer"] = self.same.issuer
        return data

    def headers(self, user: str = "alice") -> dict[str, str]:
        return {
            "authorization": f"Bearer {TENANT_KEY}",
            "x-toolgate-user-token": self.same.token(user),
        }

    def calendar_link(self, user: str) -> str:
        answer = httpx.post(
            f"{self.gateway.url}/v1/toolgate/connections/calendar/link",
            headers=self.headers(user),
        )
        assert answer.status_code == 200, answer.text
        url: str = answer.json()["url"]
        return url


def test_at_the_users_own_provider_a_link_connects_only_its_user(harness: Harness) -> None:
    stack = SameIssuerStack(harness)
    stack.same.signed_in = "alice"  # alice opened bob's link and signed in as herself
    refused = stack.browse(stack.calendar_link("bob"))
    assert refused.status_code == 502
    assert "not the user the link was made for" in refused.text
    assert stack.connections("bob") == []
    assert stack.connections("alice") == []

    stack.same.id_token = False  # who signed in cannot be told: nothing is kept either
    stack.same.signed_in = "bob"
    refused = stack.browse(stack.calendar_link("bob"))
    assert refused.status_code == 502
    assert "no ID token" in refused.text
    assert stack.connections("bob") == []

    stack.same.id_token = True  # bob himself
    assert "calendar is connected" in stack.browse(stack.calendar_link("bob")).text
    # The gateway asked for an ID token (openid) beside what the connection names.
    assert stack.same.scopes == ["calendar openid"] * 3
    assert [c["connection"] for c in stack.connections("bob")] == ["calendar"]
