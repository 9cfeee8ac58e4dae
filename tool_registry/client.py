"""The HTTP client tool calls go through: aiohttp transport, egress guard on every hop."""

from __future__ import annotations

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from .egress import EgressPolicy, GuardedResolver


def create_tool_client(
    policy: EgressPolicy,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    max_connections: int = 200,
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` for tool calls.

    Names are checked after DNS resolution by a guarded aiohttp resolver; literal
    addresses, on every request including redirect hops, by an event hook. Pass
    ``transport`` (an ``httpx.MockTransport``, say) to run without a network.
    """

    def new_session() -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            resolver=GuardedResolver(policy), limit=max_connections, ttl_dns_cache=10
        )
        return aiohttp.ClientSession(connector=connector)

    async def check_destination(request: httpx.Request) -> None:
        policy.check_url(request.url)

    return httpx.AsyncClient(
        transport=transport or AiohttpTransport(client=new_session),
        event_hooks={"request": [check_destination]},
        follow_redirects=False,
        trust_env=False,
    )


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
