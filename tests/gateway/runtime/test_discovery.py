"""Where a connection's endpoints are (docs/design.md §18): metadata documents are hostile.
A document for another issuer or resource, an endpoint on another origin, plain http
under an https issuer, a body too large or not JSON, a registration answer that is not
one: each refused with a reason, nothing kept, nothing sent where it must not go."""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config import GrantsConfig, McpConnection, OAuth2Connection
from gateway.runtime.discovery import Discovery, DiscoveryUnreached, well_known
from gateway.runtime.providers import ProviderRefused, Providers, ProviderUnreachable
from gateway.store import Keys
from gateway.store.grants import Sealer
from gateway.store.memory import MemoryStore
from gateway.store.registrations import Registrations
from tool_registry import EgressPolicy, create_tool_transport

ISSUER = "https://idp.test"
MCP = "https://mcp.test/mcp"
Handler = Callable[[httpx.Request], httpx.Response]


def server_document(**overrides: Any) -> dict[str, Any]:
    return {
        "issuer": ISSUER,
        "authorization_endpoint": f"{ISSUER}/authorize",
        "token_endpoint": f"{ISSUER}/token",
        "revocation_endpoint": f"{ISSUER}/revoke",
        "registration_endpoint": f"{ISSUER}/register",
        "code_challenge_methods_supported": ["S256"],
        **overrides,
    }


class Far:
    """The provider and the MCP server, as one mock: it answers from ``documents`` by
    URL and records every request."""

    def __init__(self, documents: dict[str, Any]) -> None:
        self.documents = documents
        self.sent: list[httpx.Request] = []
        self.registered: dict[str, Any] = {"client_id": "dyn-1", "client_secret": "dyn-secret"}
        self.challenge: str | None = None  # the MCP server's 401 WWW-Authenticate

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        url = str(request.url)
        if url == f"{ISSUER}/register" and request.method == "POST":
            return httpx.Response(201, json=self.registered)
        if url == MCP and self.challenge is not None:
            return httpx.Response(401, headers={"www-authenticate": self.challenge})
        found = self.documents.get(url)
        if found is None:
            return httpx.Response(404, json={})
        if isinstance(found, bytes):
            return httpx.Response(200, content=found)
        return httpx.Response(200, json=found)

    def urls(self) -> list[str]:
        return [str(r.url) for r in self.sent]


def providers(far: Far) -> tuple[Providers, Registrations]:
    transport = create_tool_transport(EgressPolicy(), inner=httpx.MockTransport(far))
    store = MemoryStore()
    key = base64.b64encode(os.urandom(32)).decode()
    sealer = Sealer.of(GrantsConfig.model_validate({"keys": [{"id": "k", "key": key}]}))
    registrations = Registrations(store, Keys("t:"), sealer)
    return Providers(transport, Discovery(transport), registrations), registrations


def oauth2(**extra: Any) -> OAuth2Connection:
    return OAuth2Connection(name="svc", issuer=ISSUER, client_id="c", **extra)


@pytest.mark.anyio
async def test_an_issuers_endpoints_are_read_from_its_metadata() -> None:
    far = Far({f"{ISSUER}/.well-known/oauth-authorization-server": server_document()})
    made, _ = providers(far)
    client = await made.client(oauth2(), "https://gw.test/cb")
    assert (client.authorize_url, client.token_url) == (f"{ISSUER}/authorize", f"{ISSUER}/token")
    assert client.revoke_url == f"{ISSUER}/revoke"
    assert client.issuer == ISSUER
    await made.client(oauth2(), "https://gw.test/cb")
    assert len(far.sent) == 1  # kept: not fetched for every use


@pytest.mark.anyio
async def test_openid_discovery_is_the_second_place_looked() -> None:
    far = Far({f"{ISSUER}/.well-known/openid-configuration": server_document()})
    made, _ = providers(far)
    client = await made.client(oauth2(), "https://gw.test/cb")
    assert client.token_url == f"{ISSUER}/token"
    assert far.urls()[0] == f"{ISSUER}/.well-known/oauth-authorization-server"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("document", "reason"),
    [
        (server_document(issuer="https://evil.test"), "another issuer"),
        (server_document(token_endpoint="https://evil.test/token"), "another origin"),
        (server_document(token_endpoint="http://idp.test/token"), "another origin"),
        (server_document(token_endpoint="https://idp.test:8443/token"), "another origin"),
        (server_document(authorization_endpoint=7), "not a URL"),
        (server_document(token_endpoint=None), "no token endpoint"),
        (server_document(code_challenge_methods_supported=["plain"]), "PKCE"),
        (server_document(token_endpoint="https://idp.test/t#x"), "not a URL"),
    ],
)
async def test_metadata_that_cannot_be_believed_is_refused(
    document: dict[str, Any], reason: str
) -> None:
    far = Far({f"{ISSUER}/.well-known/oauth-authorization-server": document})
    made, _ = providers(far)
    with pytest.raises(ProviderRefused, match=reason):
        await made.client(oauth2(), "https://gw.test/cb")
    assert all(r.method == "GET" for r in far.sent)  # nothing was sent anywhere it named


@pytest.mark.anyio
async def test_an_origin_the_operator_listed_is_allowed() -> None:
    document = server_document(token_endpoint="https://tokens.idp-cdn.test/token")
    far = Far({f"{ISSUER}/.well-known/oauth-authorization-server": document})
    made, _ = providers(far)
    connection = oauth2(endpoint_origins=("https://tokens.idp-cdn.test",))
    client = await made.client(connection, "https://gw.test/cb")
    assert client.token_url == "https://tokens.idp-cdn.test/token"


@pytest.mark.anyio
async def test_too_large_or_not_json_is_refused() -> None:
    big = b'{"issuer": "' + b"x" * 300_000 + b'"}'
    far = Far(
        {
            f"{ISSUER}/.well-known/oauth-authorization-server": big,
            f"{ISSUER}/.well-known/openid-configuration": b"<html>hi</html>",
        }
    )
    made, _ = providers(far)
    with pytest.raises(ProviderRefused, match="metadata"):
        await made.client(oauth2(), "https://gw.test/cb")


@pytest.mark.anyio
async def test_an_unreachable_provider_is_said_as_such() -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("down", request=request)

    transport = create_tool_transport(EgressPolicy(), inner=httpx.MockTransport(down))
    with pytest.raises(DiscoveryUnreached):
        await Discovery(transport).server(ISSUER)
    made = Providers(transport, Discovery(transport), None)
    with pytest.raises(ProviderUnreachable):
        await made.client(oauth2(), "https://gw.test/cb")


def resource_document(**overrides: Any) -> dict[str, Any]:
    return {
        "resource": MCP,
        "authorization_servers": [ISSUER],
        "scopes_supported": ["tickets:read"],
        **overrides,
    }


def mcp_far(resource: dict[str, Any] | None = None) -> Far:
    return Far(
        {
            "https://mcp.test/.well-known/oauth-protected-resource/mcp": resource
            or resource_document(),
            f"{ISSUER}/.well-known/oauth-authorization-server": server_document(),
        }
    )


@pytest.mark.anyio
async def test_an_mcp_server_names_its_authorization_server_and_the_gateway_registers() -> None:
    far = mcp_far()
    made, _ = providers(far)
    connection = McpConnection(name="desk", type="mcp", url=MCP)
    client = await made.client(connection, "https://gw.test/cb")
    assert client.resource == MCP
    assert client.scopes == ("tickets:read",)
    assert (client.client_id, client.client_secret) == ("dyn-1", "dyn-secret")
    [registration] = [r for r in far.sent if r.method == "POST"]
    sent = json.loads(registration.content)
    assert sent["redirect_uris"] == ["https://gw.test/cb"]
    assert sent["grant_types"] == ["authorization_code", "refresh_token"]
    # Kept for every replica: a second gateway on the same store does not register.
    again = await made.client(connection, "https://gw.test/cb")
    assert again.client_id == "dyn-1"
    assert len([r for r in far.sent if r.method == "POST"]) == 1


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("resource", "reason"),
    [
        (resource_document(resource="https://other.test/mcp"), "another resource"),
        (resource_document(authorization_servers=[]), "no authorization server"),
        (resource_document(authorization_servers=["file:///etc/passwd"]), "not an http"),
    ],
)
async def test_resource_metadata_that_cannot_be_believed_is_refused(
    resource: dict[str, Any], reason: str
) -> None:
    made, _ = providers(mcp_far(resource))
    with pytest.raises(ProviderRefused, match=reason):
        await made.client(McpConnection(name="desk", type="mcp", url=MCP), "https://gw.test/cb")


@pytest.mark.anyio
async def test_an_authorization_server_not_accepted_is_refused_before_it_is_asked() -> None:
    far = mcp_far()
    made, _ = providers(far)
    connection = McpConnection(name="desk", type="mcp", url=MCP, issuers=("https://ok.test",))
    with pytest.raises(ProviderRefused, match="accepted"):
        await made.client(connection, "https://gw.test/cb")
    assert not any(str(r.url).startswith(ISSUER) for r in far.sent)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "answer", [{"client_id": ""}, {"client_id": "x" * 600}, {"client_id": 5}, {"nope": 1}]
)
async def test_a_registration_that_is_not_one_is_refused_and_not_kept(
    answer: dict[str, Any],
) -> None:
    far = mcp_far()
    far.registered = answer
    made, registrations = providers(far)
    with pytest.raises(ProviderRefused, match="registration"):
        await made.client(McpConnection(name="desk", type="mcp", url=MCP), "https://gw.test/cb")
    assert await registrations.get("desk", ISSUER) is None


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), st.booleans())
def test_well_known_urls_stay_on_the_base_origin(path: str, inserted: bool) -> None:
    base = f"https://idp.test/{path}".replace("#", "").replace("?", "")
    try:
        url = well_known(base, "oauth-authorization-server", inserted=inserted)
    except ValueError:
        return
    assert url.startswith("https://idp.test/")


class Endless(httpx.AsyncByteStream):
    """A body that never comes (an MCP server's event stream, opened without a token)."""

    async def __aiter__(self):  # type: ignore[no-untyped-def]
        await asyncio.Event().wait()
        yield b""


@pytest.mark.anyio
async def test_an_endless_answer_to_the_401_probe_stalls_nothing() -> None:
    far = mcp_far()

    def answer(request: httpx.Request) -> httpx.Response:
        if str(request.url) == MCP:
            far.sent.append(request)
            return httpx.Response(200, stream=Endless())
        return far(request)

    transport = create_tool_transport(EgressPolicy(), inner=httpx.MockTransport(answer))
    discovery = Discovery(transport)
    async with asyncio.timeout(2):  # its body is never read
        metadata = await discovery.resource(MCP)
    assert metadata.resource == MCP
    await discovery.resource(MCP)  # kept: the server is not asked again
    assert [u for u in far.urls() if u == MCP] == [MCP]


@pytest.mark.anyio
async def test_the_resource_metadata_address_of_the_servers_401_is_used() -> None:
    far = mcp_far()
    far.documents["https://mcp.test/meta/prm"] = resource_document()
    far.challenge = 'Bearer error="invalid_token", resource_metadata="https://mcp.test/meta/prm"'
    made, _ = providers(far)
    client = await made.client(McpConnection(name="desk", type="mcp", url=MCP), "https://x/cb")
    assert client.resource == MCP
    assert far.urls()[:2] == [MCP, "https://mcp.test/meta/prm"]


@pytest.mark.anyio
async def test_a_resource_metadata_address_on_another_origin_is_not_fetched() -> None:
    far = mcp_far()
    far.challenge = 'Bearer resource_metadata="http://169.254.169.254/latest/meta-data/"'
    made, _ = providers(far)
    with pytest.raises(ProviderRefused, match="another origin"):
        await made.client(McpConnection(name="desk", type="mcp", url=MCP), "https://x/cb")
    assert not any("169.254" in u for u in far.urls())


@pytest.mark.anyio
async def test_an_authorization_server_at_the_metadata_address_is_refused_unasked() -> None:
    far = mcp_far(resource_document(authorization_servers=["http://169.254.169.254"]))
    made, _ = providers(far)
    with pytest.raises(ProviderRefused):
        await made.client(McpConnection(name="desk", type="mcp", url=MCP), "https://x/cb")
    assert not any("169.254" in u for u in far.urls())  # the egress guard stopped it
