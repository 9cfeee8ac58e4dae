"""HTTP plumbing for tool calls: the aiohttp transport, and sending without the client
layer.

The gateway uses httpx's request and response types and its transports, not
``httpx.AsyncClient``: the client's cookie jar, auth flow, redirect handling and event
hooks cost a good share of each call's CPU time, and the gateway needs none of them
(redirects are followed here, with the egress guard on every hop).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from .egress import EgressPolicy, GuardedResolver


def create_tool_transport(
    policy: EgressPolicy, max_connections: int = 200
) -> httpx.AsyncBaseTransport:
    """The aiohttp transport for tool calls, resolving names through the egress guard."""

    def new_session() -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            resolver=GuardedResolver(policy), limit=max_connections, ttl_dns_cache=10
        )
        return aiohttp.ClientSession(connector=connector)

    return AiohttpTransport(client=new_session)


async def send(transport: httpx.AsyncBaseTransport, request: httpx.Request) -> httpx.Response:
    """Send one request through a transport; the caller reads and closes the response."""
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
    """Whether a failed call timed out, rather than failed to connect.

    The aiohttp transport reports refused and dropped connections as
    ``httpx.ConnectTimeout`` too; its cause, an aiohttp error that is not a timeout,
    tells them apart.
    """
    if isinstance(exc, TimeoutError):
        return True
    if not isinstance(exc, httpx.TimeoutException):
        return False
    cause = exc.__cause__
    return cause is None or isinstance(cause, TimeoutError)
