"""The HTTP transport under every outbound call (tools and upstreams), and the one place
where what the network raises becomes httpx's error tree.

It is ``httpx_aiohttp``'s transport with two differences that matter for safety:

- The URL goes to aiohttp already encoded (``yarl.URL(..., encoded=True)``). Given a
  string, yarl decodes ``%2E%2E`` to ``..`` and then drops the segment before it, so a
  path argument could climb the tool's path. What leaves is byte for byte what the
  request builder encoded.
- Every failure of the network or of the far side's HTTP (refused, reset, not HTTP at
  all, a header too large, a bad URL) is mapped to an ``httpx.TransportError``
  subclass, as httpx's ``map_httpcore_exceptions`` does: a caller catches one tree.
  Refused connections are ``ConnectError``, not ``ConnectTimeout``.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from types import TracebackType

import aiohttp
import httpx
import yarl
from aiohttp import ClientTimeout
from aiohttp.client import ClientResponse
from httpx_aiohttp import AiohttpTransport

__all__ = ["GatewayTransport", "map_transport_errors"]

_LARGE_BODY = 1024 * 1024  # aiohttp's own threshold for a body given as bytes

# Most specific first: the first class an error is an instance of decides.
_MAPPING: tuple[tuple[type[BaseException], type[httpx.TransportError]], ...] = (
    (aiohttp.ConnectionTimeoutError, httpx.ConnectTimeout),
    (aiohttp.ServerTimeoutError, httpx.ReadTimeout),
    (aiohttp.ClientConnectorError, httpx.ConnectError),
    (aiohttp.ClientPayloadError, httpx.ReadError),
    (aiohttp.ClientResponseError, httpx.RemoteProtocolError),  # not HTTP, header too big
    (aiohttp.InvalidURL, httpx.UnsupportedProtocol),
    (aiohttp.NonHttpUrlClientError, httpx.UnsupportedProtocol),
    (aiohttp.ClientConnectionError, httpx.ReadError),  # reset, disconnected
    (aiohttp.ClientError, httpx.TransportError),
    (OSError, httpx.NetworkError),
    (ValueError, httpx.LocalProtocolError),  # a header or URL that cannot be encoded
)


class _ErrorMapping:
    """The context manager of ``map_transport_errors`` (a class: it runs several times
    a request, where a generator-based one costs several times as much)."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None or isinstance(exc, httpx.HTTPError):
            return
        if isinstance(exc, (aiohttp.ClientError, OSError, ValueError)):
            for source, target in _MAPPING:
                if isinstance(exc, source):
                    raise target(type(exc).__name__) from exc


_ERROR_MAPPING = _ErrorMapping()


def map_transport_errors() -> _ErrorMapping:
    """Re-raise what aiohttp, the socket layer or an encoder raise as httpx errors.

    Anything else (cancellation, the egress guard's ``EgressDenied``) passes untouched.
    The message is the class name only: aiohttp's messages can quote the URL, and a
    URL may carry a tool's secret in its query.
    """
    return _ERROR_MAPPING


class _ResponseStream(httpx.AsyncByteStream):
    CHUNK_SIZE = 64 * 1024

    def __init__(self, response: ClientResponse) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with map_transport_errors():
            async for chunk in self._response.content.iter_chunked(self.CHUNK_SIZE):
                yield chunk

    async def aclose(self) -> None:
        with map_transport_errors():
            await self._response.__aexit__(None, None, None)


class GatewayTransport(AiohttpTransport):
    """``AiohttpTransport`` sending the URL as encoded, with every error mapped."""

    _timeouts: dict[tuple[float | None, ...], ClientTimeout] | None = None

    def _timeout(self, phases: dict[str, float | None]) -> ClientTimeout:
        """aiohttp's timeout for httpx's phases, made once per distinct value (a tool's
        timeouts are its configuration's: few distinct values)."""
        key = (phases.get("connect"), phases.get("read"), phases.get("pool"))
        known = self._timeouts
        if known is None:
            known = self._timeouts = {}
        found = known.get(key)
        if found is None:
            if len(known) >= 256:
                known.clear()
            found = known[key] = ClientTimeout(
                sock_connect=key[0], sock_read=key[1], connect=key[2]
            )
        return found

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not isinstance(self.client, aiohttp.ClientSession):
            self.client = self.get_client()
        timeout = request.extensions.get("timeout", {})
        body = request.content
        # aiohttp sends a large body in pieces from a file object, not as one bytes write.
        content: bytes | io.BytesIO | None = (
            io.BytesIO(body) if len(body) > _LARGE_BODY else (body or None)
        )
        with map_transport_errors():
            url = yarl.URL(str(request.url), encoded=True)
            response = await self.client.request(
                method=request.method,
                url=url,
                headers=request.headers,
                data=content,
                allow_redirects=False,
                auto_decompress=False,
                compress=False,
                timeout=self._timeout(timeout),
                proxy=None,
            )
        extensions: dict[str, object] = {"http_version": b"HTTP/1.1"}
        if response.reason:
            extensions["reason_phrase"] = response.reason.encode("latin-1", "replace")
        return httpx.Response(
            status_code=response.status,
            headers=response.raw_headers,
            stream=_ResponseStream(response),
            request=request,
            extensions=extensions,
        )
