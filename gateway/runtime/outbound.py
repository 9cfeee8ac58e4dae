"""One small request through the guarded transport, read whole (capped), or only its
status line and headers: what the gateway's own fetches share — an identity
provider's keys, a connection's token endpoint, an MCP server's 401. Trouble on the
way (the network, the time, the egress guard) is raised as ``Unreached``, saying only
what kind it was."""

from __future__ import annotations

import asyncio

import httpx

from tool_registry import (
    EgressDenied,
    GuardedTransport,
    failure_words,
    immutable,
    read_capped,
    send,
)


class Unreached(ValueError):
    """The far side could not be reached, in time or at all (the kind is its message)."""


@immutable
class Fetched:
    """An answer: its status, its body (at most the limit), whether more was left, and
    its headers."""

    status: int
    body: bytes
    cut: bool
    headers: httpx.Headers


async def fetch(
    transport: GuardedTransport, request: httpx.Request, timeout_s: float, limit: int
) -> Fetched:
    """The answer to ``request``, its body read up to ``limit`` bytes."""
    request.extensions["timeout"] = httpx.Timeout(timeout_s).as_dict()
    try:
        async with asyncio.timeout(timeout_s):
            response = await send(transport, request)
            try:
                body, cut = await read_capped(response, limit)
            finally:
                await response.aclose()
    except (TimeoutError, httpx.HTTPError, OSError, EgressDenied) as exc:
        raise Unreached(failure_words(exc)) from exc
    return Fetched(response.status_code, body, cut, response.headers)


async def peek(
    transport: GuardedTransport, request: httpx.Request, timeout_s: float
) -> tuple[int, httpx.Headers]:
    """The status and headers of an answer; its body is never read (a stream that
    never ends stalls nothing)."""
    request.extensions["timeout"] = httpx.Timeout(timeout_s).as_dict()
    try:
        async with asyncio.timeout(timeout_s):
            response = await send(transport, request)
            await response.aclose()
    except (TimeoutError, httpx.HTTPError, OSError, EgressDenied) as exc:
        raise Unreached(failure_words(exc)) from exc
    return response.status_code, response.headers
