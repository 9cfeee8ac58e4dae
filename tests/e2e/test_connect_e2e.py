"""Connecting a user's service (docs/design.md §18) through an OAuth 2 provider: the
application asks for a link with the tenant's key and the user's token, the user's
browser (here an HTTP client that follows what a browser follows) opens it without any
key, goes to the provider with state and a PKCE challenge, comes back with a code,
and the gateway keeps the grant sealed. The provider is scripted on loopback and
checks what it receives; replayed, forged and failed round trips keep nothing."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest

from tests.e2e.test_users_e2e import AUDIENCE, Provider
from tests.support.otlp import OtlpReceiver
from tests.support.recorder import Answer, Received, Recorder
from tests.support.schema import assert_valid_response
from tests.support.scripted import MODEL, TENANT_KEY, Harness, Model, asks, call, config, says
from tests.support.servers import free_port

SECRET = "client-secret-CANARY-37"
ACCESS = "at-CANARY-user-token"


class OAuthProvider:
    """Authorizes at once (the user said yes) and answers the token endpoint, checking
    the PKCE verifier against the challenge it was shown."""

    def __init__(self, harness: Harness) -> None:
        self.recorder = Recorder(self._answer)
        self.url = harness.serve(self.recorder).url
        self.challenges: dict[str, str] = {}  # code → challenge
        self.token_answer: dict[str, Any] | None = None  # in place of a good one
        self.denied = False
        self.refusal: dict[str, str] = {"error": "access_denied"}  # what a denial says
        self.authorized: list[dict[str, str]] = []  # each authorization request's query
        self.refreshed: str | None = "at-CANARY-refreshed"  # None: refuse refreshes
        self.exchanged: list[str] = []  # whose tokens were exchanged
        self.exchange_refused = False

    def _answer(self, hit: Received) -> Answer:
        parts = urlsplit(hit.raw_path)
        if parts.path == "/authorize":
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            self.authorized.append(query)
            assert query["code_challenge_method"] == "S256"
            assert query["client_id"] == "toolgate-app"
            back = query["redirect_uri"]
            if self.denied:
                target = f"{back}?{urlencode({**self.refusal, 'state': query['state']})}"
            else:
                code = base64.urlsafe_b64encode(os.urandom(12)).decode()
                self.challenges[code] = query["code_challenge"]
                target = f"{back}?{urlencode({'code': code, 'state': query['state']})}"
            return Answer(302, b"", [("location", target)])
        if parts.path == "/exchange":  # RFC 8693: the user's JWT for an API's token
            form = {k: v[0] for k, v in parse_qs(hit.body.decode()).items()}
            assert form["grant_type"] == "urn:ietf:params:oauth:grant-type:token-exchange"
            assert form["subject_token_type"] == "urn:ietf:params:oauth:token-type:jwt"
            if self.exchange_refused or form.get("audience") != "calendar-api":
                return Answer(400, b'{"error": "invalid_target"}')
            sub = json.loads(base64.urlsafe_b64decode(form["subject_token"].split(".")[1] + "=="))
            self.exchanged.append(sub["sub"])
            answer = {
                "access_token": f"xt-CANARY-{sub['sub']}",
                "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
                "token_type": "Bearer",
                "expires_in": 600,
            }
            return Answer(body=json.dumps(answer).encode())
        if parts.path == "/revoke":
            form = {k: v[0] for k, v in parse_qs(hit.body.decode()).items()}
            ok = form == {"token": "rt-CANARY", "token_type_hint": "refresh_token"}
            return Answer(200 if ok else 400, b"{}")
        if parts.path == "/token":
            form = {k: v[0] for k, v in parse_qs(hit.body.decode()).items()}
            basic = base64.b64encode(f"toolgate-app:{SECRET}".encode()).decode()
            assert hit.headers["authorization"] == f"Basic {basic}"
            if form["grant_type"] == "refresh_token":
                if self.refreshed is None or form["refresh_token"] != "rt-CANARY":
                    return Answer(400, b'{"error": "invalid_grant"}')
                fresh = {"access_token": self.refreshed, "token_type": "Bearer", "expires_in": 60}
                return Answer(body=json.dumps(fresh).encode())
            verifier = form["code_verifier"].encode()
            challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier).digest())
            if self.challenges.pop(form["code"], None) != challenge.rstrip(b"=").decode():
                return Answer(400, b'{"error": "invalid_grant"}')
            answer = self.token_answer or {
                "access_token": ACCESS,
                "refresh_token": "rt-CANARY",
                "token_type": "Bearer",
                "expires_in": 3600,
                "scope": "repo read:user",
            }
            return Answer(body=json.dumps(answer).encode())
        return Answer(404, b"{}")


def unsigned_id_token() -> str:
    """An ID token signed with ``none``: for this gateway's client, and forged."""
    claims = {"iss": "x", "aud": "toolgate-app", "sub": "alice", "exp": int(time.time()) + 60}
    parts = [{"alg": "none", "typ": "JWT"}, claims]
    encoded = (base64.urlsafe_b64encode(json.dumps(p).encode()).rstrip(b"=") for p in parts)
    return b".".join(encoded).decode() + "."


class Stack:
    environ: dict[str, str] | None = None  # the gateway's process environment (OTEL_*)

    def __init__(self, harness: Harness) -> None:
        self.users = Provider(harness)
        self.oauth = OAuthProvider(harness)
        port = free_port()
        self.public = f"http://127.0.0.1:{port}"
        self.model_url = harness.serve(getattr(self, "model", Model(says("ok"))).recorder).url
        data = config(self.model_url, [])
        data["server"] = {"public_url": self.public}
        data["grants"] = {"keys": [{"id": "k1", "key": base64.b64encode(os.urandom(32)).decode()}]}
        data["connections"] = [
            {
                "name": "github",
                "authorize_url": f"{self.oauth.url}/authorize",
                "token_url": f"{self.oauth.url}/token",
                "client_id": "toolgate-app",
                "client_secret": SECRET,
                "revoke_url": f"{self.oauth.url}/revoke",
                "scopes": ["repo"],
            }
        ]
        settings = {"issuer": self.users.issuer, "audience": AUDIENCE}
        data["tenants"][0]["users"] = {"jwt": settings}
        self.gateway = harness.gateway(self._data(data), port=port, environ=self.environ)

    def _data(self, data: dict[str, Any]) -> dict[str, Any]:
        return data

    def headers(self, user: str = "alice") -> dict[str, str]:
        return {
            "authorization": f"Bearer {TENANT_KEY}",
            "x-toolgate-user-token": self.users.token(user),
        }

    def link(self, user: str = "alice") -> str:
        answer = httpx.post(
            f"{self.gateway.url}/v1/toolgate/connections/github/link", headers=self.headers(user)
        )
        assert answer.status_code == 200, answer.text
        url: str = answer.json()["url"]
        assert url.startswith(self.public)
        return url

    def browse(self, url: str) -> httpx.Response:
        """What a browser does: no key, follow the redirects (to the provider and back)."""
        with httpx.Client(follow_redirects=True, timeout=10) as browser:
            return browser.get(url)

    def connections(self, user: str = "alice") -> list[dict[str, Any]]:
        listed = httpx.get(
            f"{self.gateway.url}/v1/toolgate/connections", headers=self.headers(user)
        )
        data: list[dict[str, Any]] = listed.json()["data"]
        return data


def test_a_user_connects_a_service_and_the_grant_is_kept(harness: Harness) -> None:
    stack = Stack(harness)
    done = stack.browse(stack.link())
    assert done.status_code == 200
    assert "github is connected" in done.text
    assert done.headers["referrer-policy"] == "no-referrer"
    assert "frame-ancestors 'none'" in done.headers["content-security-policy"]
    [connection] = stack.connections()
    assert connection["connection"] == "github"
    assert connection["scopes"] == ["repo", "read:user"]
    assert connection["expires_at"] > 0
    assert stack.connections("bob") == []  # alice's, not bob's
    assert "CANARY" not in json.dumps(stack.connections())
    url = f"{stack.gateway.url}/v1/toolgate/connections/github"
    revoked = httpx.delete(url, headers=stack.headers())
    assert revoked.json() == {
        "object": "toolgate.connection",
        "connection": "github",
        "deleted": True,
        "revoked": True,  # the provider was asked, with the refresh token
    }
    assert stack.connections() == []


def test_a_link_and_a_callback_work_once(harness: Harness) -> None:
    stack = Stack(harness)
    link = stack.link()
    first = stack.browse(link)
    assert first.status_code == 200
    again = stack.browse(link)  # the ticket is used up
    assert again.status_code == 404
    assert "does not work" in again.text
    # A callback replayed (the same state and code): the state is used up.
    callback = next(h for h in stack.oauth.recorder.hits if h.raw_path.startswith("/authorize"))
    state = parse_qs(urlsplit(callback.raw_path).query)["state"][0]
    replayed = httpx.get(
        f"{stack.gateway.url}/v1/toolgate/connect/callback",
        params={"state": state, "code": "anything"},
    )
    assert replayed.status_code == 400
    forged = httpx.get(f"{stack.gateway.url}/v1/toolgate/connect/{'x' * 43}")
    assert forged.status_code == 404


def test_a_denied_or_bad_grant_keeps_nothing(harness: Harness) -> None:
    stack = Stack(harness)
    stack.oauth.denied = True
    denied = stack.browse(stack.link())
    assert denied.status_code == 400
    assert "access_denied" not in denied.text  # in words the user can act on
    assert "You chose not to allow it" in denied.text
    assert "ask again: it will give you a new link" in denied.text
    assert stack.oauth.authorized[-1]["nonce"]  # OpenID providers ask for one (Canaille)
    # A provider's own description of its refusal is shown and logged, as its words.
    stack.oauth.refusal = {
        "error": "invalid_request",
        "error_description": "Missing 'nonce'<script>alert(1)</script>\x07",
    }
    said = stack.browse(stack.link())
    assert said.status_code == 400
    assert "The provider said: “Missing &#x27;nonce&#x27;&lt;script&gt;" in said.text
    assert "<script>" not in said.text
    stack.oauth.denied = False
    for bad in (
        {"access_token": "a" * 100_000, "token_type": "Bearer"},
        {"access_token": ACCESS, "token_type": "Bearer", "expires_in": -5},
        {"access_token": ACCESS, "token_type": "Bearer", "expires_in": 10**12},
        {"access_token": ACCESS, "token_type": "mac"},
        {"access_token": "<script>alert(1)</script>\n", "token_type": "Bearer"},
        # An ID token beside a good access token: unsigned, or another client's.
        {"access_token": ACCESS, "token_type": "Bearer", "id_token": unsigned_id_token()},
        {
            "access_token": ACCESS,
            "token_type": "Bearer",
            "id_token": stack.users.token(aud="another-client"),
        },
    ):
        stack.oauth.token_answer = bad
        failed = stack.browse(stack.link())
        assert failed.status_code == 502
        assert "<script>" not in failed.text
    assert stack.connections() == []


def test_a_link_needs_the_key_and_a_verified_user(harness: Harness) -> None:
    stack = Stack(harness)
    url = f"{stack.gateway.url}/v1/toolgate/connections/github/link"
    assert httpx.post(url).status_code == 401
    only_key = {"authorization": f"Bearer {TENANT_KEY}"}
    assert httpx.post(url, headers=only_key).status_code == 401  # users are required
    unknown = httpx.post(
        f"{stack.gateway.url}/v1/toolgate/connections/gitlab/link", headers=stack.headers()
    )
    assert unknown.status_code == 404


@pytest.mark.parametrize("missing", ["grants", "public_url"])
def test_connections_need_grants_and_a_public_url(missing: str) -> None:
    from gateway.config import GatewayConfig

    data = config("http://up.invalid", [])
    data["server"] = {"public_url": "https://gw.example"}
    data["grants"] = {"keys": [{"id": "k1", "key": base64.b64encode(os.urandom(32)).decode()}]}
    data["connections"] = [
        {
            "name": "github",
            "authorize_url": "https://idp.example/authorize",
            "token_url": "https://idp.example/token",
            "client_id": "c",
        }
    ]
    if missing == "grants":
        del data["grants"]
    else:
        del data["server"]
    with pytest.raises(ValueError, match=missing):
        GatewayConfig.model_validate(data)


# ------------------------------------------------------------------ tools as the user


def echo(hit: Received) -> Answer:
    """A service that says whose token it got (and echoes it, as a careless one might)."""
    return Answer(body=json.dumps({"authorization": hit.headers.get("authorization")}).encode())


def quoting(body: dict[str, Any]) -> dict[str, Any]:
    """Calls ``my_repos`` once, then quotes what it read."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return says(f"read: {last['content']}")
    return asks(call("my_repos", {}, "c_repos"))


class ToolStack(Stack):
    def __init__(self, harness: Harness, **connection: Any) -> None:
        self.service = Recorder(echo)
        self.service_url = harness.serve(self.service).url
        self.model = Model(quoting)
        self._connection = connection
        super().__init__(harness)

    def _data(self, data: dict[str, Any]) -> dict[str, Any]:
        data["tools"] = [
            {
                "name": "my_repos",
                "description": "The user's own repositories.",
                "http": {"url": f"{self.service_url}/repos"},
                "auth": {"connection": "github"},
            }
        ]
        data["tenants"][0]["tools"] = ["*"]
        data["upstreams"][0]["base_url"] = f"{self.model_url}/v1"
        data["connections"][0] |= self._connection
        return data

    def ask(self, user: str = "alice") -> Any:
        headers = self.headers(user)
        body = {"model": MODEL, "messages": [{"role": "user", "content": "my repos?"}]}
        answer = httpx.post(f"{self.gateway.url}/v1/chat/completions", json=body, headers=headers)
        assert answer.status_code == 200, answer.text
        return answer


def test_a_tool_calls_as_the_user_once_connected(harness: Harness) -> None:
    stack = ToolStack(harness)
    first = stack.ask()
    link = first.headers["x-toolgate-connect"]
    assert link.startswith(f"{stack.public}/v1/toolgate/connect/")
    said = first.json()["choices"][0]["message"]["content"]
    assert link in said  # the model was told where the user connects
    assert stack.service.hits == []  # not called without the user's token
    assert "github is connected" in stack.browse(link).text
    second = stack.ask()
    assert "x-toolgate-connect" not in second.headers
    [hit] = stack.service.hits
    assert hit.headers["authorization"] == f"Bearer {ACCESS}"
    assert ACCESS not in second.text  # the token it echoed is cut from what the model read
    assert "[redacted]" in second.text
    # Another user of the tenant gets no one's token but their own: a link.
    assert "x-toolgate-connect" in stack.ask("bob").headers
    assert len(stack.service.hits) == 1


def test_an_expired_grant_is_refreshed_once(harness: Harness) -> None:
    stack = ToolStack(harness, refresh_margin_s=3600)  # every grant is "about to expire"
    stack.browse(stack.link())
    stack.oauth.refreshed = "at-CANARY-refreshed"
    stack.ask()
    [hit] = stack.service.hits
    assert hit.headers["authorization"] == "Bearer at-CANARY-refreshed"
    refreshes = [h for h in stack.oauth.recorder.hits if b"refresh_token" in h.body]
    assert len(refreshes) == 1
    # A refresh the provider refuses (the grant was revoked): forgotten, a link again.
    stack.oauth.refreshed = None
    assert "x-toolgate-connect" in stack.ask().headers
    assert stack.connections() == []


class ExchangeStack(ToolStack):
    """``my_repos`` calls as the user through a token exchange, with no consent."""

    def _data(self, data: dict[str, Any]) -> dict[str, Any]:
        data = super()._data(data)
        data["connections"].append(
            {
                "name": "calendar",
                "type": "token_exchange",
                "token_url": f"{self.oauth.url}/exchange",
                "client_id": "toolgate-app",
                "client_secret": SECRET,
                "audience": "calendar-api",
            }
        )
        data["tools"][0]["auth"] = {"connection": "calendar"}
        return data


def test_a_token_exchange_acts_as_the_user_with_no_consent(harness: Harness) -> None:
    stack = ExchangeStack(harness)
    first = stack.ask()
    assert "x-toolgate-connect" not in first.headers
    stack.ask()  # the exchanged token is kept (sealed) until it is about to expire
    stack.ask("bob")
    assert stack.oauth.exchanged == ["alice", "bob"]
    tokens = [hit.headers["authorization"] for hit in stack.service.hits]
    assert tokens == ["Bearer xt-CANARY-alice"] * 2 + ["Bearer xt-CANARY-bob"]
    assert "xt-CANARY" not in first.text  # echoed, and cut


def test_a_refused_exchange_is_said_and_nothing_is_called(harness: Harness) -> None:
    stack = ExchangeStack(harness)
    stack.oauth.exchange_refused = True
    answer = stack.ask()
    assert "x-toolgate-connect" not in answer.headers  # no consent would help
    assert "refused the exchange" in answer.json()["choices"][0]["message"]["content"]
    assert stack.service.hits == []


class OpenApiStack(ToolStack):
    """The service as an OpenAPI document whose operations call as the user."""

    directory = ""  # where the document is written

    def _data(self, data: dict[str, Any]) -> dict[str, Any]:
        data = super()._data(data)
        document = {
            "openapi": "3.0.3",
            "info": {"title": "repos", "version": "1"},
            "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
            "security": [{"bearer": []}],
            "paths": {
                "/repos": {
                    "get": {
                        "operationId": "my_repos",
                        "summary": "The user's own repositories.",
                        "parameters": [
                            {"name": "Authorization", "in": "header", "schema": {"type": "string"}}
                        ],
                        "responses": {"200": {"description": "OK"}},
                    }
                }
            },
        }
        path = os.path.join(self.directory, "repos.json")
        with open(path, "w", encoding="utf-8") as file:
            json.dump(document, file)
        data["tools"] = []
        data["openapi"] = [{"spec": path, "base_url": self.service_url, "connection": "github"}]
        return data


def test_an_openapi_source_calls_as_the_user(harness: Harness, tmp_path: Any) -> None:
    OpenApiStack.directory = str(tmp_path)
    stack = OpenApiStack(harness)
    link = stack.ask().headers["x-toolgate-connect"]
    assert stack.service.hits == []
    stack.browse(link)
    stack.ask()
    [hit] = stack.service.hits
    assert hit.headers["authorization"] == f"Bearer {ACCESS}"
    # The model was never offered the Authorization header as an argument.
    offered = stack.model.requests[0]["tools"][0]["function"]["parameters"]["properties"]
    assert "Authorization" not in offered


def test_a_user_s_token_is_the_only_authorization_a_tool_sends() -> None:
    from pydantic import ValidationError

    from tool_registry import OpenApiSource, ToolSpec

    with pytest.raises(ValidationError, match="Authorization"):
        OpenApiSource(spec="a.json", connection="github", headers={"AUTHORIZATION": "x"})
    tool: dict[str, Any] = {
        "name": "t",
        "http": {"url": "https://api.example/x"},
        "auth": {"connection": "g"},
    }
    with pytest.raises(ValidationError, match="redirect"):
        ToolSpec.model_validate({**tool, "http": {**tool["http"], "follow_redirects": True}})
    with pytest.raises(ValidationError, match="Authorization"):
        ToolSpec.model_validate(
            {**tool, "http": {**tool["http"], "headers": {"Authorization": "Bearer k"}}}
        )
    with pytest.raises(ValidationError, match="cache_ttl_s"):
        ToolSpec.model_validate({**tool, "cache_ttl_s": 60})


def test_an_mcp_client_s_call_acts_as_its_user_too(harness: Harness) -> None:
    """Over ``/mcp`` (the official MCP client): no grant, an error result with the link;
    once connected, the call carries the user's token."""
    import asyncio

    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp_types import TextContent

    stack = ToolStack(harness)

    async def call() -> str:
        http = httpx2.AsyncClient(headers=stack.headers())
        client = Client(streamable_http_client(f"{stack.gateway.url}/mcp", http_client=http))
        async with http, client:
            result = await client.call_tool("my_repos", {})
            [content] = result.content
            assert isinstance(content, TextContent)
            return content.text

    refused = asyncio.run(call())
    assert f"{stack.public}/v1/toolgate/connect/" in refused
    assert stack.service.hits == []
    link = refused.split(" at ")[1].split(" ")[0]
    assert "github is connected" in stack.browse(link).text
    asyncio.run(call())
    [hit] = stack.service.hits
    assert hit.headers["authorization"] == f"Bearer {ACCESS}"


class AssertedStack(ToolStack):
    """The tenant's key asserts its users (a trusted backend): no user token."""

    def _data(self, data: dict[str, Any]) -> dict[str, Any]:
        data = super()._data(data)
        data["tenants"][0]["users"] = {"asserted": {"header": "x-acme-user"}}
        return data

    def headers(self, user: str = "alice") -> dict[str, str]:
        return {"authorization": f"Bearer {TENANT_KEY}", "x-acme-user": user}


def test_a_user_the_key_asserts_connects_and_is_acted_for(harness: Harness) -> None:
    stack = AssertedStack(harness)
    link = stack.ask().headers["x-toolgate-connect"]
    assert "github is connected" in stack.browse(link).text
    stack.ask()
    [hit] = stack.service.hits
    assert hit.headers["authorization"] == f"Bearer {ACCESS}"
    assert "x-toolgate-connect" in stack.ask("bob").headers  # bob's own, not alice's
    assert len(stack.service.hits) == 1
    url = f"{stack.gateway.url}/v1/chat/completions"
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    unnamed = httpx.post(url, json=body, headers={"authorization": f"Bearer {TENANT_KEY}"})
    assert unnamed.status_code == 401
    assert unnamed.json()["error"]["code"] == "user_required"
    twice = httpx.post(
        url,
        json=body,
        headers=[
            ("authorization", f"Bearer {TENANT_KEY}"),
            ("x-acme-user", "a"),
            ("x-acme-user", "b"),
        ],
    )
    assert twice.status_code == 400


def test_users_are_verified_or_asserted_not_both() -> None:
    from gateway.config import GatewayConfig

    data = config("http://up.invalid", [])
    data["tenants"][0]["users"] = {
        "asserted": {},
        "jwt": {"issuer": "https://idp.example", "audience": "a"},
    }
    with pytest.raises(ValueError, match="one of jwt"):
        GatewayConfig.model_validate(data)


class FewPagesStack(ToolStack):
    def _data(self, data: dict[str, Any]) -> dict[str, Any]:
        data = super()._data(data)
        data["grants"]["pages_per_minute"] = 3
        return data


def test_the_keyless_pages_are_rate_limited_per_browser(harness: Harness) -> None:
    stack = FewPagesStack(harness)
    base = f"{stack.gateway.url}/v1/toolgate/connect"
    seen = [httpx.get(f"{base}/{'x' * 43}").status_code for _ in range(2)]
    seen.append(httpx.get(f"{base}/callback", params={"state": "s" * 43}).status_code)
    assert seen == [404, 404, 400]  # forged tickets, a forged callback: each counted
    refused = httpx.get(f"{base}/{'x' * 43}")
    assert refused.status_code == 429
    assert int(refused.headers["retry-after"]) >= 1
    assert "Too many attempts" in refused.text
    assert refused.headers["cache-control"] == "no-store"
    # The application's own routes (with the key) are not these pages' budget.
    assert stack.link().startswith(stack.public)


class RecordedStack(ToolStack):
    """Recording every request, and exporting its spans to a collector."""

    environ = {"OTEL_BSP_SCHEDULE_DELAY": "50"}

    def __init__(self, harness: Harness) -> None:
        self.collector = OtlpReceiver()
        self.collector_url = harness.serve(self.collector).url
        super().__init__(harness)

    def _data(self, data: dict[str, Any]) -> dict[str, Any]:
        data = super()._data(data)
        data["tenants"][0]["record"] = "all"
        data["otel"] = {"endpoint": self.collector_url}
        return data


def test_the_users_token_is_in_no_trace_recording_log_metric_or_answer(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """The service echoes the token it got; everything the gateway keeps or says of
    the call is read for it: the answer, the trace and its recording, the log, the
    metrics, the connections list, the model's own input."""
    caplog.set_level("DEBUG")
    stack = RecordedStack(harness)
    stack.browse(stack.ask().headers["x-toolgate-connect"])
    answer = stack.ask()
    [hit] = stack.service.hits
    assert hit.headers["authorization"] == f"Bearer {ACCESS}"  # it did get the token
    key = {"authorization": f"Bearer {TENANT_KEY}"}
    trace = httpx.get(  # alice's own (docs/security.md: a user's trace is theirs)
        f"{stack.gateway.url}/v1/toolgate/traces/{answer.headers['x-request-id']}",
        headers=stack.headers(),
    )
    assert trace.status_code == 200
    assert trace.json()["recording"]  # the recording is there, and read below
    metrics = httpx.get(f"{stack.gateway.url}/metrics", headers=key)
    assert "toolgate_tool_calls_total" in metrics.text
    stack.collector.tool_span_of(answer.headers["x-toolgate-trace-id"])
    spans = json.dumps([[s.name, s.attributes, s.events] for s in stack.collector.spans])
    assert any(r.name.startswith("gateway") for r in caplog.records)  # the log was read
    everything = {
        "answer": answer.text,
        "trace and recording": trace.text,
        "log": caplog.text,
        "metrics": metrics.text,
        "connections": json.dumps(stack.connections()),
        "model input": json.dumps(stack.model.requests),
        "spans": spans,
    }
    for where, text in everything.items():
        for secret in (ACCESS, "rt-CANARY", SECRET):
            assert secret not in text, f"{secret[:8]}… in the {where}"


def test_a_token_the_service_refuses_is_refreshed_then_forgotten(harness: Harness) -> None:
    """The grant was revoked at the provider: the service answers 401. The next use
    refreshes it; when the provider will not refresh either, it is forgotten and the
    user gets a link."""
    stack = ToolStack(harness)
    refused_tokens = {f"Bearer {ACCESS}"}

    def service(hit: Received) -> Answer:
        if hit.headers.get("authorization") in refused_tokens:
            return Answer(401, b'{"error": "invalid_token"}')
        return echo(hit)

    stack.service.respond = service
    stack.browse(stack.ask().headers["x-toolgate-connect"])
    stack.ask()  # 401: the grant is marked for a refresh
    assert stack.ask().status_code == 200  # refreshed, and the new token is taken
    tokens = [hit.headers["authorization"] for hit in stack.service.hits]
    assert tokens == [f"Bearer {ACCESS}", "Bearer at-CANARY-refreshed"]
    refused_tokens.add("Bearer at-CANARY-refreshed")
    stack.oauth.refreshed = None  # the provider revoked the grant
    stack.ask()  # 401 again
    assert "x-toolgate-connect" in stack.ask().headers  # the refresh refused: a link
    assert stack.connections() == []


def test_the_responses_surface_carries_the_link_too(harness: Harness) -> None:
    stack = ToolStack(harness)
    body = {"model": MODEL, "input": "my repos?"}
    answer = httpx.post(f"{stack.gateway.url}/v1/responses", json=body, headers=stack.headers())
    assert answer.status_code == 200, answer.text
    link = answer.headers["x-toolgate-connect"]
    assert_valid_response(answer.json())
    text = answer.json()["output"][-1]["content"][0]["text"]
    assert link in text  # the model was told, and its message is what a client shows
    assert stack.service.hits == []


def test_a_round_trip_ends_only_in_the_browser_that_began_it(harness: Harness) -> None:
    """Mallory opens her own link and sends alice the provider's page it led to: alice
    consents, and the callback comes back in alice's browser, which did not begin the
    round trip (no cookie): refused, and mallory holds no grant of alice's."""
    stack = ToolStack(harness)
    with httpx.Client(timeout=10) as mallorys:
        began = mallorys.get(stack.link("mallory"))
        assert began.status_code == 302
        assert any(c.startswith("toolgate_connect_") for c in mallorys.cookies)
        set_cookie = began.headers["set-cookie"].lower()
        assert "httponly" in set_cookie
        assert "samesite=lax" in set_cookie
        assert "path=/v1/toolgate/connect" in set_cookie
    victims = stack.browse(began.headers["location"])  # another browser: no cookie
    assert victims.status_code == 400
    assert "did not start in this browser" in victims.text
    assert stack.connections("mallory") == []


class TaintedStack(ToolStack):
    """``post_comment`` writes as the user; the tenant refuses writes after untrusted
    input, and ``read_page`` is untrusted."""

    def _data(self, data: dict[str, Any]) -> dict[str, Any]:
        data = super()._data(data)
        data["tools"] = [
            {
                "name": "post_comment",
                "description": "Post a comment as the user.",
                "http": {"url": f"{self.service_url}/comments", "method": "POST"},
                "auth": {"connection": "github"},
            },
            {
                "name": "read_page",
                "description": "Read a web page.",
                "http": {"url": f"{self.service_url}/page"},
            },
        ]
        data["policy"] = {"tools": [{"tools": ["read_page"], "output": "untrusted"}]}
        data["tenants"][0]["policy"] = {"after_untrusted": "refuse"}
        return data


def reads_then_writes(body: dict[str, Any]) -> dict[str, Any]:
    tools = [m for m in body["messages"] if m["role"] == "tool"]
    if len(tools) == 2:
        return says(f"done: {tools[-1]['content']}")
    if tools:
        return asks(call("post_comment", {}, "c_post"))
    return asks(call("read_page", {}, "c_read"))


def test_a_write_as_the_user_after_untrusted_input_follows_the_tenants_rule(
    harness: Harness,
) -> None:
    stack = TaintedStack(harness)
    stack.model.script = [reads_then_writes]
    stack.browse(stack.link())  # connected: the user's token is there to be used
    answer = stack.ask()
    said = answer.json()["choices"][0]["message"]["content"]
    assert "untrusted" in said  # the refusal says why, not the tainting words
    posted = [hit for hit in stack.service.hits if hit.method == "POST"]
    assert posted == []  # the write was not made, as the user or at all
    assert [hit.raw_path for hit in stack.service.hits] == ["/page"]
