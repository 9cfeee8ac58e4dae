"""HTTP plumbing for tool calls: the one guarded transport, and sending without the
client layer.

Everything the gateway sends on behalf of configuration or of a model (tool calls,
approval webhooks, OpenAPI document fetches, replay's live reads, the tools' probe)
goes through a ``GuardedTransport`` (docs/design.md §15): the egress guard sits under the
transport, so a caller cannot hold an unguarded one. It judges a literal address in
the URL before anything is sent, and every name when it is resolved
(``GuardedResolver``), so each hop of a redirect is judged as the first was. MCP
servers are reached through the SDK's own client, guarded the same way in its network
backend (``sources/mcp_transport.py``).

The gateway uses httpx's request and response types and its transports, not
``httpx.AsyncClient``: the client's cookie jar, auth flow, redirect handling and event
hooks cost a good share of each call's CPU time, and the gateway needs none of them
(redirects are followed by the executor, each hop through this transport).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import httpx

from .egress import EgressPolicy, GuardedResolver
from .request_builder import ToolRequest
from .transport import GatewayTransport, Reply, map_transport_errors

__all__ = ["GuardedTransport", "body_chunks", "create_tool_transport", "is_timeout", "send"]


class GuardedTransport(httpx.AsyncBaseTransport):
    """The egress guard over a transport: a request whose URL names a refused address
    raises ``EgressDenied`` before the transport sees it. ``create_tool_transport``
    builds the real one, whose resolver judges names too; ``inner`` is for tests (an
    ``httpx.MockTransport`` resolves nothing, so only literal addresses are judged)."""

    __slots__ = ("_inner", "policy")

    def __init__(self, policy: EgressPolicy, inner: httpx.AsyncBaseTransport) -> None:
        self.policy = policy
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.policy.check_url(request.url)
        return await self._inner.handle_async_request(request)

    async def exchange(self, request: httpx.Request) -> Reply:
        """``request`` sent through the guard, its answer not yet read: aiohttp's own
        over the real transport, httpx's over any other (a test's ``MockTransport``)."""
        self.policy.check_url(request.url)
        inner = self._inner
        if isinstance(inner, GatewayTransport):
            return await inner.exchange(request)
        return await send(inner, request)

    async def call(self, request: ToolRequest) -> Reply:
        """A tool call's request sent through the guard as it was built: on aiohttp
        directly over the real transport, as httpx's over any other."""
        self.policy.check_url(request.url)
        inner = self._inner
        if isinstance(inner, GatewayTransport):
            return await inner.send_call(request)
        return await send(inner, request.as_httpx())

    async def aclose(self) -> None:
        await self._inner.aclose()


def create_tool_transport(
    policy: EgressPolicy,
    max_connections: int = 200,
    *,
    inner: httpx.AsyncBaseTransport | None = None,
) -> GuardedTransport:
    """The one way out: aiohttp resolving names through the egress guard, under the
    guard's check of literal addresses (or ``inner``, for tests, under that check)."""

    def new_session() -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            resolver=GuardedResolver(policy), limit=max_connections, ttl_dns_cache=10
        )
        # No cookie jar: a tool's Set-Cookie, from one tenant's call, is never sent on
        # the next (anyone's) call.
        return aiohttp.ClientSession(
            connector=connector, trust_env=False, cookie_jar=aiohttp.DummyCookieJar()
        )

    return GuardedTransport(policy, inner or GatewayTransport(client=new_session))


async def send(transport: httpx.AsyncBaseTransport, request: httpx.Request) -> httpx.Response:
    """Send one request through a transport; the caller reads and closes the response.

    Whatever transport it is (tests pass ``MockTransport``), what it raises for the
    network or an unencodable request is mapped into httpx's tree.
    """
    with map_transport_errors():
        response = await transport.handle_async_request(request)
    response.request = request
    return response


def body_chunks(response: Reply) -> AsyncIterator[bytes]:
    """The body as it arrives: raw when there is nothing to decode (httpx's decoder chain
    costs per chunk), decoded otherwise, or what was already read."""
    if "content-encoding" in response.headers or response.is_stream_consumed:
        return response.aiter_bytes()
    return response.aiter_raw()


def is_timeout(exc: BaseException) -> bool:
    """Whether a failed call timed out, rather than failed to connect or broke off."""
    return isinstance(exc, TimeoutError | httpx.TimeoutException)
