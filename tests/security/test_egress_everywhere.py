"""One guarded way out (docs/design.md §15, issue 34 §1).

Every place that sends on behalf of configuration or of a model — a tool call, the
approval webhook, an OpenAPI document fetch, an MCP server's listing, a replay's live
read, the tools' probe — is driven against the same destinations with
``deny_private: true`` and ``allow_hosts: [localhost]``: a loopback address not
allowed, a host that is allowed, a redirect from an allowed host into a refused one,
and the metadata address. A canary server on loopback counts what reached it. A
source scan lists every place in the code that opens an outbound connection, so a new
one cannot appear without a row here.
"""

from __future__ import annotations

import ast
import contextlib
import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.datastructures import Headers

from gateway.chat_json import encode_tool
from gateway.config import (
    GatewayConfig,
    GuardrailConfig,
    JwtUsersConfig,
    McpConnection,
    OAuth2Connection,
)
from gateway.engine.recorded import decode
from gateway.errors import GatewayError
from gateway.policy.judges import Subject
from gateway.runtime.outbound import Unreached, fetch
from gateway.runtime.probe import probe_tools
from gateway.runtime.providers import ProviderClient, ProviderRefused
from gateway.runtime.replayer import Replayer
from gateway.runtime.services import Gateway
from tests.support.recorder import Answer, Received, Recorder
from tests.support.servers import ServerThread
from tool_registry import (
    CallContext,
    ToolConfigError,
    definition_fingerprint,
    fetch_document,
)

ROOT = Path(__file__).resolve().parents[2]

# ------------------------------------------------------------------ the code's ways out

# What opens a connection, by the name it is called with. Anything here outside the
# places below is a new way out: give it the guard, and a row in the matrix.
_OPENERS = frozenset(
    {
        "ClientSession",
        "TCPConnector",
        "AsyncClient",
        "Client",
        "AsyncHTTPTransport",
        "HTTPTransport",
        "AiohttpTransport",
        "GatewayTransport",
        "AsyncConnectionPool",
        "open_connection",
        "create_connection",
        "getaddrinfo",
        "urlopen",
        "socket",
    }
)

# Every place, and what guards it.
PLACES = {
    # The one guarded transport: ``GuardedTransport`` over aiohttp, names resolved by
    # ``GuardedResolver`` (tools, webhooks, OpenAPI documents, replay, the probe).
    ("tool_registry/client.py", "TCPConnector"): "guarded transport",
    ("tool_registry/client.py", "ClientSession"): "guarded transport",
    ("tool_registry/client.py", "GatewayTransport"): "guarded transport",
    # MCP servers: the SDK's httpx2 client over ``GuardedBackend`` (same policy object).
    ("tool_registry/sources/mcp_transport.py", "AsyncConnectionPool"): "guarded backend",
    ("tool_registry/sources/mcp_transport.py", "getaddrinfo"): "guarded backend",
    ("tool_registry/sources/mcp_transport.py", "AsyncClient"): "guarded backend",
    ("tool_registry/sources/mcp.py", "Client"): "the SDK's client over guarded_client",
    # The operator's own model servers, named only in configuration, never by a model
    # or a document (and commonly on a private address): not under deny_private.
    ("gateway/upstream/wire.py", "TCPConnector"): "upstreams (operator's)",
    ("gateway/upstream/wire.py", "ClientSession"): "upstreams (operator's)",
}


def _openers(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in _OPENERS:
                found.add(name)
    return found


def test_every_way_out_in_the_code_is_a_known_guarded_place() -> None:
    seen = {
        (str(path.relative_to(ROOT)), name)
        for package in ("gateway", "tool_registry")
        for path in sorted((ROOT / package).rglob("*.py"))
        for name in _openers(path)
    }
    assert seen == set(PLACES), "a way out that is not in PLACES: guard it, then list it"


def test_every_consumer_is_typed_to_hold_only_the_guarded_transport() -> None:
    """What sends for configuration or a model takes a ``GuardedTransport`` (mypy holds
    the rest): a plain ``httpx`` transport does not type-check there."""
    from gateway.ops.webhook import Webhooks
    from gateway.policy.guardrails import Guard
    from gateway.policy.judges import HttpJudge
    from gateway.runtime.discovery import Discovery
    from gateway.runtime.oauth import OAuthClient
    from gateway.runtime.providers import Providers
    from gateway.runtime.remote_sources import OpenApiUrl, RemoteSources
    from gateway.runtime.user_keys import UserKeys
    from tool_registry import ToolExecutor

    consumers = (
        ToolExecutor,
        HttpJudge,
        Guard,
        Webhooks,
        OpenApiUrl,
        RemoteSources,
        Replayer,
        Discovery,
        OAuthClient,
        Providers,
    )
    for consumer in consumers:
        hints = consumer.__init__.__annotations__
        assert any("GuardedTransport" in str(v) for v in hints.values()), consumer
    assert "GuardedTransport" in str(fetch_document.__annotations__["transport"])
    assert "Discovery" in str(UserKeys.__init__.__annotations__["discovery"])  # through it


# ------------------------------------------------------------------ the matrix


class Far:
    """The canary (127.0.0.1, reached as ``localhost`` where allowed) and a redirector
    on ``localhost`` that sends every request on to the canary's refused address."""

    def __init__(self) -> None:
        self.canary = Recorder()
        self.redirector = Recorder(self._to_canary)
        self._servers = [ServerThread(self.canary).start(), ServerThread(self.redirector).start()]
        self.canary_port = self._servers[0].port
        self.redirector_port = self._servers[1].port

    def _to_canary(self, hit: Received) -> Answer:
        target = f"http://127.0.0.1:{self.canary_port}/canary"
        return Answer(status=302, body=b"", headers=[("location", target)])

    def url(self, where: str) -> str:
        return {
            "loopback": f"http://127.0.0.1:{self.canary_port}/x",
            "allowed": f"http://localhost:{self.canary_port}/x",
            "redirect": f"http://localhost:{self.redirector_port}/x",
        }[where]

    def close(self) -> None:
        for server in self._servers:
            server.stop()


@pytest.fixture(scope="module")
def far() -> Iterator[Far]:
    servers = Far()
    yield servers
    servers.close()


def _config(url: str, deny_private: bool = True, **sections: Any) -> GatewayConfig:
    tool = {"name": "look", "http": {"url": url, "follow_redirects": True}}
    return GatewayConfig.model_validate(
        {
            "upstreams": [{"name": "up", "base_url": "http://model.test/v1"}],
            "models": [{"name": "m", "upstream": "up"}],
            "tools": [tool],
            "egress": {"deny_private": deny_private, "allow_hosts": ["localhost"]},
            **sections,
        }
    )


def _model(request: httpx.Request) -> httpx.Response:
    """An upstream that calls ``look`` once, then answers."""
    body = json.loads(request.content)
    if any(m["role"] == "tool" for m in body["messages"]):
        message: dict[str, Any] = {"role": "assistant", "content": "done"}
    else:
        call = {"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return httpx.Response(200, json={"choices": [{"index": 0, "message": message}]})


async def _tool(gateway: Gateway, url: str) -> None:
    tool = gateway.registry.get("look")
    assert tool is not None
    await gateway.executor.execute(tool.prepare("{}", CallContext("default")))


async def _webhook(gateway: Gateway, url: str) -> None:
    await gateway.webhooks.deliver(url, {"type": "approval.pending"})


async def _openapi(gateway: Gateway, url: str) -> None:
    with contextlib.suppress(ToolConfigError):
        await fetch_document(url, gateway.tool_transport)


async def _replay(gateway: Gateway, url: str) -> None:
    tool = gateway.registry.get("look")
    assert tool is not None
    recording = {
        "loop": {"params": {"model": "m", "messages": [{"role": "user", "content": "go"}]}},
        "tools": [
            {
                "definition": encode_tool(tool.definition),
                "fingerprint": definition_fingerprint(encode_tool(tool.definition)),
                "effects": "read",
            }
        ],
    }
    replayer = Replayer(gateway.runtime, gateway.upstream_wire, gateway.tool_transport)
    replayed = await replayer.replay(decode(recording), "m", None, live_read=True)
    assert replayed.tool_calls[0].served == "live"


async def _probe(gateway: Gateway, url: str) -> None:
    await probe_tools(gateway)


async def _user_keys(gateway: Gateway, url: str) -> None:
    """A tenant's end users' identity provider: its JWKS, fetched to verify a token."""
    settings = JwtUsersConfig(issuer="https://idp.test", audience="a", jwks_url=url)
    headers = Headers({"x-toolgate-user-token": "e30.e30.sig"})
    with contextlib.suppress(GatewayError):
        await gateway.users.user(headers, settings)


async def _oauth(gateway: Gateway, url: str) -> None:
    """A connection's token endpoint: a code exchanged for a user's grant."""
    client = ProviderClient("svc", authorize_url="https://idp.test/a", token_url=url, client_id="c")
    with contextlib.suppress(ProviderRefused):
        await gateway.oauth.exchange(client, "code", "verifier", "https://gw.test/cb")


async def _issuer(gateway: Gateway, url: str) -> None:
    """An oauth2 connection's issuer: its metadata document, read for the endpoints."""
    connection = OAuth2Connection(name="svc", issuer=url.split("?")[0], client_id="c")
    with contextlib.suppress(ProviderRefused):
        await gateway.providers.client(connection, "https://gw.test/cb")


async def _mcp_resource(gateway: Gateway, url: str) -> None:
    """An mcp connection's server: its protected resource metadata, read for the
    authorization server."""
    connection = McpConnection(name="svc", type="mcp", url=url)
    with contextlib.suppress(ProviderRefused):
        await gateway.providers.client(connection, "https://gw.test/cb")


async def _guardrail(gateway: Gateway, url: str) -> None:
    """An HTTP guardrail: the operator's service, asked to judge a tool's result."""
    config = GuardrailConfig(name="corp", kind="http", url=url, timeout_s=5)
    await gateway.guard.screen([config], "some text", Subject("tool_result", "look"))


async def _sources(gateway: Gateway, url: str) -> None:
    """The OpenAPI URL and the MCP server were tried when the gateway started."""
    sources = gateway.runtimes.sources
    assert sources is not None
    assert [s.state for s in sources.all()] == ["down", "down"]


Place = Callable[[Gateway, str], Awaitable[None]]
MATRIX: dict[str, Place] = {
    "tool call": _tool,
    "approval webhook": _webhook,
    "openapi fetch": _openapi,
    "replay live read": _replay,
    "probe": _probe,
    "user keys (JWKS)": _user_keys,
    "connection token endpoint": _oauth,
    "connection issuer metadata": _issuer,
    "mcp connection resource metadata": _mcp_resource,
    "http guardrail": _guardrail,
    "openapi and mcp sources": _sources,
}


def _sections(place: str, url: str) -> dict[str, Any]:
    if place != "openapi and mcp sources":
        return {}
    return {"openapi": [{"spec": url, "timeout_s": 2}], "mcp": [{"name": "m", "url": url}]}


@pytest.mark.anyio
@pytest.mark.parametrize("where", ["loopback", "allowed", "redirect"])
@pytest.mark.parametrize("place", list(MATRIX))
async def test_every_place_goes_through_the_one_guard(far: Far, place: str, where: str) -> None:
    far.canary.clear()
    far.redirector.clear()
    url = far.url(where)
    config = _config(url, **_sections(place, url))
    async with Gateway(config, upstream_transport=httpx.MockTransport(_model)) as gateway:
        await MATRIX[place](gateway, url)
    if where == "allowed":  # the same settings, no stricter: an allowed host is reached
        assert far.canary.hits, f"{place} did not reach an allowed host"
    else:  # a refused address, directly or by a redirect, hears nothing
        assert far.canary.hits == [], f"{place} reached a refused address ({where})"


@pytest.mark.anyio
@pytest.mark.parametrize("place", [p for p in MATRIX if p != "openapi and mcp sources"])
async def test_the_metadata_address_is_refused_before_anything_is_sent(place: str) -> None:
    """Under the guard, a transport that records: nothing reaches it for 169.254.169.254
    (an address no test may connect to, so the far side is this recorder)."""
    sent: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"ok": True})

    url = "http://169.254.169.254/latest/meta-data/"
    async with Gateway(
        _config(url, deny_private=False),
        upstream_transport=httpx.MockTransport(_model),
        tool_transport=httpx.MockTransport(record),
    ) as gateway:
        await MATRIX[place](gateway, url)
    assert sent == []


@pytest.mark.anyio
@pytest.mark.parametrize("url", ["http://127.0.0.2:9/hook", "http://169.254.169.254/hook"])
async def test_a_webhook_the_guard_refuses_is_logged_as_refused(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The refusal reaches the webhook under the transport's network error: it is said
    as the guard's refusal, not as a network failure."""
    async with Gateway(_config(url), upstream_transport=httpx.MockTransport(_model)) as gateway:
        await gateway.webhooks.deliver(url, {"type": "approval.pending"})
    said = [r.getMessage() for r in caplog.records if r.name == "gateway.approvals"]
    assert said, caplog.text
    assert all("refused by the egress policy" in line for line in said), said


@pytest.mark.anyio
async def test_a_fetch_the_guard_refuses_says_so() -> None:
    """Providers' metadata, keys and token endpoints are fetched through ``outbound``:
    a refused address is named as refused there too, not as a network failure."""
    url = "http://169.254.169.254/token"
    async with Gateway(_config(url), upstream_transport=httpx.MockTransport(_model)) as gateway:
        with pytest.raises(Unreached, match="refused by the egress policy"):
            await fetch(gateway.tool_transport, httpx.Request("POST", url), 2.0, 1024)
