"""Who the user is (docs/design.md §18): a tenant that verifies its end users accepts a JWT
from the application's identity provider, checked against the provider's JWKS
(fetched through the egress guard, refetched when the provider rotates its keys), and
the user it names is bound into tool calls (``{user.id}``) and into what is kept for
them. Driven by the stock SDK against a gateway under uvicorn, a JWKS server and a
recording tool server; hostile tokens and key documents are refused, with nothing
fetched from where it must not be."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import jwt
import openai
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from gateway.config import GatewayConfig, GrantsConfig
from gateway.runtime.probe import Probe, probe_users
from gateway.runtime.services import Gateway
from gateway.store import Keys
from gateway.store.grants import Grant, GrantStore
from gateway.store.redis import RedisStore, redis_client
from tests.support.recorder import Answer, Received, Recorder
from tests.support.scripted import MODEL, TENANT_KEY, Harness, Model, config, tool_then_answer
from tests.support.servers import ServerThread, free_port

AUDIENCE = "toolgate-tests"


class Provider:
    """An identity provider's key documents, served on loopback; its keys can rotate."""

    def __init__(self, harness: Harness, host: str = "127.0.0.1") -> None:
        self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = "k1"
        self.recorder = Recorder(self._answer)
        self.server: ServerThread = harness.serve(self.recorder, host)
        self.issuer = self.server.url
        self.jwks_uri = f"{self.issuer}/jwks"
        self.extra_keys: list[dict[str, Any]] = []

    def jwk(self) -> dict[str, Any]:
        return {**json.loads(RSAAlgorithm.to_jwk(self.private.public_key())), "kid": self.kid}

    def _answer(self, hit: Received) -> Answer:
        if hit.raw_path == "/.well-known/openid-configuration":
            document = {"issuer": self.issuer, "jwks_uri": self.jwks_uri}
            return Answer(body=json.dumps(document).encode())
        if hit.raw_path == "/jwks":
            return Answer(body=json.dumps({"keys": [*self.extra_keys, self.jwk()]}).encode())
        return Answer(404, b"{}")

    def rotate(self) -> None:
        self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = f"k{int(self.kid[1:]) + 1}"

    def token(self, user: str = "alice", **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": self.issuer, "aud": AUDIENCE, "sub": user, "iat": now, "exp": now + 300}
        return jwt.encode(body | claims, self.private, "RS256", headers={"kid": self.kid})

    def fetches(self) -> int:
        return sum(1 for hit in self.recorder.hits if hit.raw_path == "/jwks")


class Stack:
    def __init__(
        self,
        harness: Harness,
        users: dict[str, Any] | None = None,
        issuer_suffix: str = "",
        **extra: Any,
    ):
        self.provider = Provider(harness)
        self.tools = Recorder(lambda hit: Answer(body=b'{"length": 5}'))
        tools_url = harness.serve(self.tools).url
        self.model = Model(tool_then_answer("mine"))
        mine = {
            "name": "mine",
            "description": "The caller's own things.",
            "parameters": {"type": "object", "properties": {"s": {"type": "string"}}},
            "bind": {"owner": "{user.id}"},
            "http": {"url": f"{tools_url}/mine", "query": {"owner": "{owner}"}},
        }
        data = config(harness.serve(self.model.recorder).url, [mine], **extra)
        settings = {
            "issuer": self.provider.issuer + issuer_suffix,
            "audience": AUDIENCE,
            "min_refresh_s": 0,
            **(users or {}),
        }
        data["tenants"][0]["users"] = {"jwt": settings}
        self.gateway = harness.gateway(data)
        self.harness = harness

    def client(self, token: str | None) -> openai.OpenAI:
        headers = {"x-toolgate-user-token": f"Bearer {token}"} if token is not None else {}
        client = openai.OpenAI(
            base_url=f"{self.gateway.url}/v1",
            api_key=TENANT_KEY,
            max_retries=0,
            default_headers=headers,
        )
        self.harness.on_close(client.close)
        return client

    def ask(self, token: str | None) -> Any:
        return self.client(token).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": '{"s": "x"}'}]
        )

    def owners(self) -> list[str]:
        return [parse_qs(urlsplit(h.raw_path).query)["owner"][0] for h in self.tools.hits]


def refusal(stack: Stack, token: str | None) -> str:
    with pytest.raises(openai.AuthenticationError) as raised:
        stack.ask(token)
    body: Any = raised.value.body
    assert body["code"] == "invalid_user_token"
    message: str = body["message"]
    return message


def test_a_verified_user_is_bound_into_tool_calls(harness: Harness) -> None:
    stack = Stack(harness)
    assert stack.ask(stack.provider.token("alice")).choices[0].message.content == "done"
    assert stack.ask(stack.provider.token("bob")).choices[0].message.content == "done"
    assert stack.owners() == ["alice", "bob"]
    assert stack.provider.fetches() == 1  # the keys are kept
    # The keys came through the issuer's discovery document.
    assert stack.provider.recorder.hits[0].raw_path == "/.well-known/openid-configuration"


def test_tokens_that_do_not_hold_are_refused(harness: Harness) -> None:
    stack = Stack(harness)
    provider = stack.provider
    assert "none was sent" in refusal(stack, None)
    assert "expired" in refusal(stack, provider.token(exp=int(time.time()) - 3600))
    assert "audience" in refusal(stack, provider.token(aud="someone-else"))
    assert "another issuer" in refusal(stack, provider.token(iss="https://evil.example"))
    assert "not a JWT" in refusal(stack, "not.a.token")
    assert "too large" in refusal(stack, "e" * 1_000_000)
    unsigned = jwt.encode({"sub": "alice", "aud": AUDIENCE}, "", "none")
    assert "'none'" in refusal(stack, unsigned)
    # The old confusion: HS256 "signed" with the provider's public key as the secret.
    public = provider.private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    forged = _hs256(public, provider)
    assert "'HS256'" in refusal(stack, forged)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    claims = {"iss": provider.issuer, "aud": AUDIENCE, "sub": "mallory", "exp": 2**31}
    wrong = jwt.encode(claims, other, "RS256", headers={"kid": provider.kid})
    assert "signature" in refusal(stack, wrong)
    assert "claim" in refusal(stack, provider.token(sub=""))
    assert stack.tools.hits == []  # nothing ran for any of them


def _hs256(secret: bytes, provider: Provider) -> str:
    """A token "signed" with HS256 under ``secret`` (PyJWT refuses a PEM as an HMAC
    key, as it should: the signature is made by hand)."""

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": provider.kid}).encode())
    claims = {"sub": "mallory", "aud": AUDIENCE, "iss": provider.issuer, "exp": 2**31}
    body = b64(json.dumps(claims).encode())
    signature = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(signature)}"


def test_rotated_keys_are_fetched_again_once(harness: Harness) -> None:
    stack = Stack(harness)
    provider = stack.provider
    stack.ask(provider.token("alice"))
    provider.rotate()
    stack.ask(provider.token("alice"))  # a kid not held: fetched again, then verified
    assert provider.fetches() == 2
    stack.ask(provider.token("bob"))
    assert provider.fetches() == 2
    assert stack.owners() == ["alice", "alice", "bob"]


def test_an_ec_key_and_a_configured_jwks_url(harness: Harness) -> None:
    stack = Stack(harness)
    provider = stack.provider
    curve = ec.generate_private_key(ec.SECP256R1())
    jwk = {**json.loads(ECAlgorithm.to_jwk(curve.public_key())), "kid": "ec1"}
    provider.extra_keys = [jwk, {"kty": "oct", "k": "c2VjcmV0", "kid": "shared"}]
    claims = {"iss": provider.issuer, "aud": AUDIENCE, "sub": "carol", "exp": 2**31}
    token = jwt.encode(claims, curve, "ES256", headers={"kid": "ec1"})
    assert stack.ask(token).choices[0].message.content == "done"
    # A shared-secret key in the JWKS is never used: HS256 is refused whatever it holds.
    shared = jwt.encode(claims, b"s" * 32, "HS256", headers={"kid": "shared"})
    assert "'HS256'" in refusal(stack, shared)
    assert stack.owners() == ["carol"]


def test_keys_from_where_they_must_not_come_are_not_fetched(harness: Harness) -> None:
    canary = Recorder(lambda hit: Answer(body=b'{"keys": []}'))
    elsewhere = harness.serve(canary, "127.0.0.2")
    stack = Stack(harness)
    stack.provider.jwks_uri = f"{elsewhere.url}/jwks"  # discovery points to another origin
    with pytest.raises(openai.InternalServerError) as raised:
        stack.ask(stack.provider.token())
    assert raised.value.status_code == 503
    assert canary.hits == []
    # The egress policy guards the fetch too: keys on a refused address are not had.
    guarded = Stack(harness, egress={"deny_private": True})
    with pytest.raises(openai.InternalServerError):
        guarded.ask(guarded.provider.token())
    assert guarded.provider.recorder.hits == []


def test_an_issuer_written_with_a_trailing_slash_is_said_in_the_log(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 52 §9: every request got 503 user_keys_unavailable and the log said nothing.
    Now the log says why (once a minute), and what to change."""
    caplog.set_level("WARNING", logger="gateway.users")
    stack = Stack(harness, issuer_suffix="/")
    for _ in range(3):
        with pytest.raises(openai.InternalServerError) as raised:
            stack.ask(stack.provider.token())
        assert raised.value.status_code == 503
    said = [r.getMessage() for r in caplog.records if r.name == "gateway.users"]
    assert len(said) == 1, said  # not once a request
    assert "cannot be verified" in said[0]
    assert "ends with '/'" in said[0]


def test_check_probe_asks_the_identity_provider(harness: Harness) -> None:
    """Issue 52 §9: ``toolgate check --probe`` said ok with the identity provider on a dead
    port. It now fetches the issuer's keys as a request would, and says why it cannot."""
    provider = Provider(harness)

    async def probed(issuer: str) -> list[Probe]:
        users = {"jwt": {"issuer": issuer, "audience": AUDIENCE}}
        config = GatewayConfig.model_validate(
            {
                "upstreams": [{"name": "up", "base_url": "http://127.0.0.1:9/v1"}],
                "models": [{"name": MODEL, "upstream": "up"}],
                "tenants": [{"id": "acme", "keys": [TENANT_KEY], "users": users}],
            }
        )
        async with Gateway(config) as gateway:
            return await probe_users(gateway)

    (found,) = asyncio.run(probed(provider.issuer))
    assert (found.kind, found.name, found.ok) == ("identity provider", "acme", True)
    assert found.detail == "1 signing key(s)"
    (slashed,) = asyncio.run(probed(provider.issuer + "/"))
    assert not slashed.ok
    assert "ends with '/'" in slashed.hint
    (dead,) = asyncio.run(probed(f"http://127.0.0.1:{free_port()}"))
    assert not dead.ok
    assert "no user token of these tenants can be verified" in dead.hint


def test_a_tenant_may_let_anonymous_requests_through(harness: Harness) -> None:
    stack = Stack(harness, {"required": False})
    assert stack.ask(None).choices[0].message.content == "done"
    assert stack.tools.hits == []  # the tool needs a user: it was not called
    assert "verified user" in stack.model.tool_results()[0]


def test_one_user_cannot_read_another_s_stored_response(harness: Harness) -> None:
    stack = Stack(harness)
    alice = stack.client(stack.provider.token("alice"))
    bob = stack.client(stack.provider.token("bob"))
    stored = alice.responses.create(model=MODEL, input='{"s": "x"}')
    assert alice.responses.retrieve(stored.id).id == stored.id
    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve(stored.id)
    headers = {"authorization": f"Bearer {TENANT_KEY}"}
    anonymous = httpx.get(f"{stack.gateway.url}/v1/responses/{stored.id}", headers=headers)
    assert anonymous.status_code == 401


def test_a_user_lists_and_forgets_their_connections(
    harness: Harness, redis_url: str, redis_prefix: str
) -> None:
    """The routes of the user's application (docs/design.md §18): a user's connections,
    kept sealed in the shared store (a grant put there by another replica), listed
    without a token, and forgotten; another user sees none of them."""
    grants = {"keys": [{"id": "k1", "key": base64.b64encode(os.urandom(32)).decode()}]}
    prefix = f"{redis_prefix}grants:"
    harness.store = {"url": redis_url, "prefix": prefix, "timeout_s": 2.0}
    stack = Stack(harness, grants=grants)

    async def put() -> None:
        store = RedisStore(redis_client(redis_url, timeout_s=2.0))
        vault = GrantStore(store, Keys(prefix), GrantsConfig.model_validate(grants))
        await vault.put(
            "acme", "alice", Grant("github", "at-CANARY-1", "rt-CANARY-1", 2e9, ("repo",))
        )
        await store.aclose()

    asyncio.run(put())
    provider = stack.provider
    alice = {"authorization": f"Bearer {TENANT_KEY}", "x-toolgate-user-token": provider.token()}
    bob = {**alice, "x-toolgate-user-token": provider.token("bob")}
    url = f"{stack.gateway.url}/v1/toolgate/connections"
    listed = httpx.get(url, headers=alice)
    assert listed.status_code == 200, listed.text
    assert listed.json()["data"] == [
        {
            "object": "toolgate.connection",
            "connection": "github",
            "scopes": ["repo"],
            "expires_at": 2e9,
        }
    ]
    assert "CANARY" not in listed.text
    assert httpx.get(url, headers=bob).json()["data"] == []
    assert httpx.delete(f"{url}/github", headers=bob).status_code == 404
    assert httpx.delete(f"{url}/github", headers=alice).json()["deleted"] is True
    assert httpx.get(url, headers=alice).json()["data"] == []
    anonymous = {"authorization": f"Bearer {TENANT_KEY}"}
    assert httpx.get(url, headers=anonymous).status_code == 401  # users are required here


def test_check_probe_asks_each_connections_provider(harness: Harness) -> None:
    """Issue 52 §9: ``toolgate check --probe`` said ok with a connection's provider on a
    dead port. It now reads each provider's metadata (or reaches its token endpoint) as
    a user's first connection would, asks for no token, and says why it cannot."""
    from gateway.runtime.probe import probe_connections
    from tests.e2e.test_links_stay_theirs_e2e import SameProvider

    provider = SameProvider(harness)
    dead = f"http://127.0.0.1:{free_port()}"
    connections: list[dict[str, Any]] = [
        {"name": "found", "issuer": provider.issuer, "client_id": "c"},
        {"name": "slashed", "issuer": provider.issuer + "/", "client_id": "c"},
        {"name": "gone", "issuer": dead, "client_id": "c"},
        {
            "name": "by_hand",
            "authorize_url": f"{provider.issuer}/authorize",
            "token_url": f"{provider.issuer}/token",
            "client_id": "c",
        },
        {
            "name": "hand_dead",
            "authorize_url": f"{dead}/a",
            "token_url": f"{dead}/t",
            "client_id": "c",
        },
    ]

    async def probed() -> list[Probe]:
        config = GatewayConfig.model_validate(
            {
                "server": {"public_url": "http://127.0.0.1:1"},
                "grants": {"keys": [{"id": "k", "key": base64.b64encode(os.urandom(32)).decode()}]},
                "upstreams": [{"name": "up", "base_url": "http://127.0.0.1:9/v1"}],
                "models": [{"name": MODEL, "upstream": "up"}],
                "connections": connections,
                "tenants": [{"id": "acme", "keys": [TENANT_KEY]}],
            }
        )
        async with Gateway(config) as gateway:
            return await probe_connections(gateway)

    found = {p.name: p for p in asyncio.run(probed())}
    assert {p.kind for p in found.values()} == {"connection"}
    assert found["found"].ok, found["found"]
    assert found["found"].detail == f"its metadata named the endpoints (issuer {provider.issuer})"
    assert not found["slashed"].ok
    assert "ends with '/'" in found["slashed"].hint
    assert not found["gone"].ok
    assert "users cannot connect gone" in found["gone"].hint
    assert found["by_hand"].ok
    assert found["by_hand"].detail.startswith("its token endpoint answered HTTP ")
    assert not found["hand_dead"].ok
    asked = [h.raw_path for h in provider.recorder.hits]
    assert not any(p.startswith("/authorize") for p in asked)  # nothing was asked for
    assert all(h.method == "GET" for h in provider.recorder.hits)
