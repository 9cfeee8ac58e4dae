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
from collections.abc import AsyncIterator, Iterator, Mapping
from types import TracebackType
from typing import Any, Protocol

import aiohttp
import httpx
import yarl
from aiohttp import ClientTimeout
from aiohttp.client import ClientResponse
from httpx_aiohttp import AiohttpTransport
from multidict import CIMultiDictProxy

from .request_builder import ToolRequest

__all__ = [
    "AiohttpTimeouts",
    "GatewayTransport",
    "Reply",
    "aiohttp_body",
    "map_transport_errors",
]

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


class AiohttpTimeouts:
    """aiohttp's timeout for httpx's phases (``connect``, ``read``, ``pool``), made once
    per distinct value: an upstream's or a tool's timeouts are its configuration's, so
    there are few (the cache is cleared past 256 all the same)."""

    __slots__ = ("_known",)

    def __init__(self) -> None:
        self._known: dict[tuple[float | None, ...], ClientTimeout] = {}

    def __call__(self, phases: Mapping[str, float | None]) -> ClientTimeout:
        key = (phases.get("connect"), phases.get("read"), phases.get("pool"))
        found = self._known.get(key)
        if found is None:
            if len(self._known) >= 256:
                self._known.clear()
            found = self._known[key] = ClientTimeout(
                sock_connect=key[0], sock_read=key[1], connect=key[2]
            )
        return found


def aiohttp_body(content: bytes) -> bytes | io.BytesIO | None:
    """A request body as aiohttp should be given it: a large one from a file object (sent
    in pieces, not as one bytes write), none for an empty one."""
    return io.BytesIO(content) if len(content) > _LARGE_BODY else (content or None)


class GatewayTransport(AiohttpTransport):
    """``AiohttpTransport`` sending the URL as encoded, with every error mapped."""

    _timeouts: AiohttpTimeouts | None = None

    async def _send(self, request: httpx.Request) -> ClientResponse:
        timeout = request.extensions.get("timeout", {})
        return await self._request(
            request.method, request.url, request.headers, request.content, timeout
        )

    async def _request(
        self,
        method: str,
        url: httpx.URL,
        headers: Mapping[str, str],
        content: bytes,
        phases: Mapping[str, float | None],
    ) -> ClientResponse:
        if not isinstance(self.client, aiohttp.ClientSession):
            self.client = self.get_client()
        if self._timeouts is None:
            self._timeouts = AiohttpTimeouts()
        with map_transport_errors():
            return await self.client.request(
                method=method,
                url=yarl.URL(str(url), encoded=True),
                headers=headers,
                data=aiohttp_body(content),
                allow_redirects=False,
                auto_decompress=False,
                compress=False,
                timeout=self._timeouts(phases),
                proxy=None,
            )

    async def send_call(self, request: ToolRequest) -> Reply:
        """A tool call's request sent as it was built (``exchange``'s answer): aiohttp
        writes its ``host`` and ``content-length`` as httpx would."""
        response = await self._request(
            request.method, request.url, request.headers, request.content, request.timeout
        )
        if "content-encoding" in response.headers:
            return _as_httpx(response, request.as_httpx())
        return _AiohttpReply(response)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return _as_httpx(await self._send(request), request)

    async def exchange(self, request: httpx.Request) -> Reply:
        """``request`` sent, its answer's status and headers in: aiohttp's own answer
        read directly when its body is sent as it is, not httpx's models around it (a
        tool call's client side cost two and a half times a bare aiohttp call's that
        way); an encoded body (gzip, br, ...) is still decoded by httpx, as before."""
        response = await self._send(request)
        if "content-encoding" in response.headers:
            return _as_httpx(response, request)
        return _AiohttpReply(response)


def _as_httpx(response: ClientResponse, request: httpx.Request) -> httpx.Response:
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


class Reply(Protocol):
    """An HTTP answer, its body not yet read: what the executor and the document
    fetcher read of ``httpx.Response``, which is one."""

    @property
    def status_code(self) -> int: ...

    @property
    def reason_phrase(self) -> str: ...

    @property
    def headers(self) -> Mapping[str, str]: ...  # case-insensitive

    @property
    def is_stream_consumed(self) -> bool: ...

    def aiter_raw(self) -> AsyncIterator[bytes]: ...  # as it came

    def aiter_bytes(self) -> AsyncIterator[bytes]: ...  # decoded

    async def aclose(self) -> None: ...


class _AiohttpReply:
    """aiohttp's answer as a ``Reply``: one whose body is sent as it is (identity), so
    its raw and decoded bytes are the same. Header lookups are case-insensitive; a
    repeated header's values are joined with commas, as httpx joins them."""

    __slots__ = ("_response", "headers", "reason_phrase", "status_code")
    is_stream_consumed = False

    def __init__(self, response: ClientResponse) -> None:
        self._response = response
        self.status_code = response.status
        # As httpx says it: the server's phrase in ASCII, or the standard one.
        reason = (response.reason or "").encode("latin-1", "replace").decode("ascii", "ignore")
        self.reason_phrase = (
            reason if response.reason else httpx.codes.get_reason_phrase(response.status)
        )
        self.headers: Mapping[str, str] = _JoinedHeaders(response.headers)

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        with map_transport_errors():
            async for chunk in self._response.content.iter_chunked(_ResponseStream.CHUNK_SIZE):
                yield chunk

    aiter_bytes = aiter_raw

    async def aclose(self) -> None:
        with map_transport_errors():
            await self._response.__aexit__(None, None, None)


class _JoinedHeaders(Mapping[str, str]):
    """aiohttp's multidict of headers read as httpx reads them: any letter case, and a
    repeated header as its values joined by ``, ``."""

    __slots__ = ("_headers",)

    def __init__(self, headers: CIMultiDictProxy[str]) -> None:
        self._headers = headers

    def __getitem__(self, key: str) -> str:
        values = self._headers.getall(key)
        return values[0] if len(values) == 1 else ", ".join(values)

    def get(self, key: str, default: Any = None) -> Any:
        values = self._headers.getall(key, None)
        if values is None:
            return default
        return values[0] if len(values) == 1 else ", ".join(values)

    def __contains__(self, key: object) -> bool:
        return key in self._headers

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys(k.lower() for k in self._headers))

    def __len__(self) -> int:
        return len({k.lower() for k in self._headers})
