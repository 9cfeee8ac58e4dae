"""HTTP plumbing for tool calls: the transport, and sending without the client layer.

The gateway uses httpx's request and response types and its transports, not
``httpx.AsyncClient``: the client's cookie jar, auth flow, redirect handling and event
hooks cost a good share of each call's CPU time, and the gateway needs none of them
(redirects are followed here, with the egress guard on every hop).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import httpx

from .egress import EgressPolicy, GuardedResolver
from .transport import GatewayTransport, map_transport_errors

__all__ = ["body_chunks", "create_tool_transport", "is_timeout", "send"]


def create_tool_transport(
    policy: EgressPolicy, max_connections: int = 200
) -> httpx.AsyncBaseTransport:
    """The transport for tool calls, resolving names through the egress guard."""

    def new_session() -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            resolver=GuardedResolver(policy), limit=max_connections, ttl_dns_cache=10
        )
        return aiohttp.ClientSession(connector=connector, trust_env=False)

    return GatewayTransport(client=new_session)


async def send(transport: httpx.AsyncBaseTransport, request: httpx.Request) -> httpx.Response:
    """Send one request through a transport; the caller reads and closes the response.

    Whatever transport it is (tests pass ``MockTransport``), what it raises for the
    network or an unencodable request is mapped into httpx's tree.
    """
    with map_transport_errors():
        response = await transport.handle_async_request(request)
    response.request = request
    return response


def body_chunks(response: httpx.Response) -> AsyncIterator[bytes]:
    """The body as it arrives: raw when there is nothing to decode (httpx's decoder chain
    costs per chunk), decoded otherwise, or what was already read."""
    if "content-encoding" in response.headers or response.is_stream_consumed:
        return response.aiter_bytes()
    return response.aiter_raw()


def is_timeout(exc: BaseException) -> bool:
    """Whether a failed call timed out, rather than failed to connect or broke off."""
    return isinstance(exc, TimeoutError | httpx.TimeoutException)
