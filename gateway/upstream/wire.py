"""The upstream exchange on the wire: one request out, its answer's status, headers and
body back (docs/design.md §4; issue 38).

On the hot path the gateway speaks to its model servers through one aiohttp session
directly (``AiohttpWire``): building httpx's request and response models around every
exchange cost more than the rest of a pass-through's own work. ``HttpxWire`` carries
the same exchange over any httpx transport: the tests' ``MockTransport`` and an
in-process app. Both raise httpx's error tree for the network's failures
(``map_transport_errors``), so ``client.upstream_errors`` maps one tree whichever it is.

Upstreams are the operator's own servers, named only in configuration: they are not
under the egress guard (docs/design.md §15), and nothing here follows a redirect.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Protocol

import aiohttp
import httpx
import yarl

from tool_registry import AiohttpTimeouts, aiohttp_body, map_transport_errors, send

Timeouts = Mapping[str, float | None]  # httpx's: connect, read, write, pool


class Answer(Protocol):
    """An upstream's answer, its body not yet read: read or stream it, then close it."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...  # case-insensitive

    def aiter_raw(self) -> AsyncIterator[bytes]: ...  # as it comes

    async def aread(self) -> bytes: ...  # the whole body

    async def aclose(self) -> None: ...


class Wire(Protocol):
    async def send(
        self, method: str, url: str, headers: Mapping[str, str], content: bytes, phases: Timeouts
    ) -> Answer: ...

    async def aclose(self) -> None: ...


class _AiohttpAnswer:
    __slots__ = ("_response", "headers", "status_code")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status_code = response.status
        self.headers: Mapping[str, str] = response.headers

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        with map_transport_errors():
            async for chunk in self._response.content.iter_any():
                yield chunk

    async def aread(self) -> bytes:
        with map_transport_errors():
            return await self._response.read()

    async def aclose(self) -> None:
        self._response.release()


class AiohttpWire:
    """One aiohttp session for every upstream: pooled connections kept alive, the URL
    sent as it was encoded, compressed answers decoded, no redirect followed, no
    cookie kept."""

    def __init__(self, max_connections: int = 1000) -> None:
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._timeouts = AiohttpTimeouts()

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:  # made on the loop that serves
            connector = aiohttp.TCPConnector(limit=self._max_connections, keepalive_timeout=60)
            # No cookie jar: an upstream's Set-Cookie is never sent back (another
            # tenant's request would carry it).
            self._session = aiohttp.ClientSession(
                connector=connector, trust_env=False, cookie_jar=aiohttp.DummyCookieJar()
            )
        return self._session

    async def send(
        self, method: str, url: str, headers: Mapping[str, str], content: bytes, phases: Timeouts
    ) -> Answer:
        with map_transport_errors():
            response = await self._client().request(
                method,
                yarl.URL(url, encoded=True),
                headers=headers,
                data=aiohttp_body(content),
                allow_redirects=False,
                compress=False,
                timeout=self._timeouts(phases),
                proxy=None,
            )
        return _AiohttpAnswer(response)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


class HttpxWire:
    """The exchange over an httpx transport (the tests' ``MockTransport``, say)."""

    def __init__(self, transport: httpx.AsyncBaseTransport) -> None:
        self.transport = transport

    async def send(
        self, method: str, url: str, headers: Mapping[str, str], content: bytes, phases: Timeouts
    ) -> Answer:
        request = httpx.Request(
            method, url, content=content, headers=headers, extensions={"timeout": dict(phases)}
        )
        return await send(self.transport, request)

    async def aclose(self) -> None:
        await self.transport.aclose()


def upstream_wire(transport: httpx.AsyncBaseTransport | None = None) -> Wire:
    """The wire to the upstreams: aiohttp's own, or one over ``transport`` (tests)."""
    return AiohttpWire() if transport is None else HttpxWire(transport)
