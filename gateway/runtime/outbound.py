"""One small request through the guarded transport, read whole (capped): what the
gateway's own fetches share — an identity provider's keys, a connection's token
endpoint. Trouble on the way (the network, the time, the egress guard) is raised as
``Unreached``, saying only what kind it was."""

from __future__ import annotations

import asyncio

import httpx

from tool_registry import EgressDenied, GuardedTransport, read_capped, send


class Unreached(ValueError):
    """The far side could not be reached, in time or at all (the kind is its message)."""


async def fetch(
    transport: GuardedTransport, request: httpx.Request, timeout_s: float, limit: int
) -> tuple[int, bytes, bool]:
    """The status, the body (at most ``limit`` bytes) and whether more was left."""
    request.extensions["timeout"] = httpx.Timeout(timeout_s).as_dict()
    try:
        async with asyncio.timeout(timeout_s):
            response = await send(transport, request)
            try:
                body, cut = await read_capped(response, limit)
            finally:
                await response.aclose()
    except (TimeoutError, httpx.HTTPError, OSError, EgressDenied) as exc:
        raise Unreached(type(exc).__name__) from exc
    return response.status_code, body, cut
