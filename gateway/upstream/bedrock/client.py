"""The ``bedrock`` dialect's client: ``Converse`` and ``ConverseStream`` on
``bedrock-runtime``, over the shared exchange.

Credentials are botocore's: a Bedrock API key (the upstream's ``api_key``, sent as a
bearer token), or else the standard AWS chain — the environment, a profile, web identity
(EKS service accounts), the instance's role — refreshed as botocore refreshes them, each
request signed with SigV4 by botocore's own signer (docs/design.md §20: never a
hand-written signer). A refresh that reaches the network runs off the event loop.

A stream is AWS's binary event stream: its frames are cut out as they arrive (a frame
larger than ``MAX_FRAME_BYTES`` is refused before it is buffered) and each is checked
and decoded by botocore's parser."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import quote

import botocore.session
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials, RefreshableCredentials
from botocore.eventstream import EventStreamBuffer, ParserError

from gateway.config import UpstreamConfig
from gateway.errors import UpstreamError
from gateway.upstream.bedrock.signatures import unsigned
from gateway.upstream.exchange import (
    LARGE_ANSWER_BYTES,
    UpstreamClient,
    close_quietly,
    large_answer_of,
    map_status_error,
    read_all,
    upstream_errors,
    whole_object,
)
from gateway.upstream.port import Secrets
from tool_registry import dumps, loads_object

SERVICE = "bedrock"
MAX_FRAME_BYTES = 1024 * 1024  # far more than any event Converse streams
_PRELUDE = 12
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})  # as the AWS SDKs retry them


def retryable(status: int, headers: Mapping[str, str]) -> bool:
    """Throttling (429, ``ModelNotReadyException`` too), timeouts and the service's own
    failures, as the AWS SDKs' standard mode retries them."""
    return status in RETRY_STATUSES


def api_key(upstream: UpstreamConfig) -> Mapping[str, str]:
    """A Bedrock API key, when the upstream has one, as its bearer token."""
    if upstream.api_key is not None and upstream.api_key.get_secret_value():
        return {"authorization": f"Bearer {upstream.api_key.get_secret_value()}"}
    return {}


def region_of(upstream: UpstreamConfig) -> str:
    """The upstream's region (the configuration reads it from a ``bedrock-runtime`` host
    where it was not given, and refuses a bedrock upstream with neither)."""
    if upstream.region is None:  # only a configuration built past its validation
        raise UpstreamError(f"The upstream {upstream.name!r} names no AWS region.")
    return upstream.region


T = TypeVar("T")


class AwsSigner:
    """SigV4 with the standard credential chain, resolved once (off the loop) and
    refreshed by botocore as they near their expiry. Each set of keys it signs with
    (the access key, the secret key, the session token: refreshed ones too) is said to
    ``secrets`` before its first use, so an AWS error quoting one is redacted."""

    def __init__(self, secrets: Secrets | None = None) -> None:
        self._credentials: Credentials | None = None
        self._lock = threading.Lock()
        self._secrets = secrets
        self._said: tuple[str | None, ...] = ()  # the keys last said to ``secrets``

    def _resolve(self) -> Credentials:
        with self._lock:
            if self._credentials is None:
                found = botocore.session.get_session().get_credentials()
                if found is None:
                    raise UpstreamError(
                        "No AWS credentials were found for a Bedrock upstream: set its "
                        "api_key (a Bedrock API key), or give the gateway AWS credentials "
                        "(the environment, a profile, web identity or an instance role)."
                    )
                self._credentials = found
            return self._credentials

    async def frozen(self) -> Any:
        credentials = self._credentials
        if credentials is None:
            credentials = await asyncio.to_thread(self._resolve)
        if isinstance(credentials, RefreshableCredentials) and credentials.refresh_needed():
            frozen = await asyncio.to_thread(credentials.get_frozen_credentials)
        else:
            frozen = credentials.get_frozen_credentials()
        keys = (frozen.access_key, frozen.secret_key, frozen.token)
        if keys != self._said and self._secrets is not None:
            self._secrets([key for key in keys if key])
            self._said = keys
        return frozen

    async def __call__(
        self,
        upstream: UpstreamConfig,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
    ) -> Mapping[str, str]:
        """``headers`` with the request's SigV4 signature (none with an API key)."""
        if upstream.api_key is not None and upstream.api_key.get_secret_value():
            return headers
        credentials = await self.frozen()
        request = AWSRequest(method=method, url=url, data=body, headers=dict(headers))
        SigV4Auth(credentials, SERVICE, region_of(upstream)).add_auth(request)
        return dict(request.headers.items())


def model_path(model: str, stream: bool) -> str:
    """The operation's path: the model id (or its ARN) encoded as one segment."""
    operation = "converse-stream" if stream else "converse"
    return f"/model/{quote(model, safe='')}/{operation}"


def error_message(body: bytes, headers: Mapping[str, str]) -> str | None:
    """An AWS error's words: its body's ``message``, else the kind its header names;
    never a signature it quotes."""
    found = loads_object(body) or {}
    said = found.get("message", found.get("Message"))
    if isinstance(said, str):
        return unsigned(said)
    kind = headers.get("x-amzn-errortype", "")
    return unsigned(kind.split(":", 1)[0]) or None


class BedrockClient:
    """Sends Converse requests, signed."""

    __slots__ = ("_exchange",)

    def __init__(self, exchange: UpstreamClient) -> None:
        self._exchange = exchange

    async def converse(
        self,
        upstream: UpstreamConfig,
        model: str,
        body: dict[str, Any],
        read: Callable[[dict[str, Any]], T],
        trace: Mapping[str, str] | None = None,
    ) -> T:
        path = model_path(model, False)
        response = await self._exchange.send(upstream, path, dumps(body), trace=trace)
        data = await read_all(upstream, response)
        if response.status_code >= 300:
            said = error_message(data, response.headers)
            raise map_status_error(upstream.name, response, data, said)
        if len(data) <= LARGE_ANSWER_BYTES:  # the common case: no coroutine, no thread
            return read(whole_object(upstream.name, data))
        return await large_answer_of(upstream.name, data, read)

    async def converse_stream(
        self,
        upstream: UpstreamConfig,
        model: str,
        body: dict[str, Any],
        trace: Mapping[str, str] | None = None,
    ) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
        """One streamed answer: its events as (type, payload), as they come."""
        path = model_path(model, True)
        response = await self._exchange.send(
            upstream, path, dumps(body), accept="application/vnd.amazon.eventstream", trace=trace
        )
        if response.status_code >= 300:
            data = await read_all(upstream, response)
            said = error_message(data, response.headers)
            raise map_status_error(upstream.name, response, data, said)
        frames = Frames()
        try:
            with upstream_errors(upstream.name, "stream"):
                async for chunk in response.aiter_raw():
                    for event in frames.feed(chunk):
                        yield event
            if frames.pending:
                raise UpstreamError("The upstream model server broke off its event stream.")
        finally:
            await close_quietly(response)


class Frames:
    """AWS event-stream frames cut from the bytes as they come, each decoded by
    botocore's parser (its checksums, its header rules); hostile frames are the
    upstream's fault."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    @property
    def pending(self) -> int:
        return len(self._buffer)

    def feed(self, chunk: bytes) -> list[tuple[str, dict[str, Any]]]:
        self._buffer += chunk
        events = []
        while len(self._buffer) >= _PRELUDE:
            total = int.from_bytes(self._buffer[:4], "big")
            if not _PRELUDE + 4 <= total <= MAX_FRAME_BYTES:
                raise UpstreamError(
                    "The upstream model server sent an event frame of no size it may."
                )
            if len(self._buffer) < total:
                break
            frame = bytes(self._buffer[:total])
            del self._buffer[:total]
            events.append(_event(frame))
        return events


def _event(frame: bytes) -> tuple[str, dict[str, Any]]:
    parser = EventStreamBuffer()
    try:
        parser.add_data(frame)
        decoded: list[Any] = list(parser)  # botocore's stubs type the iterator wrongly
        [message] = decoded
    except (ParserError, ValueError) as exc:
        raise UpstreamError("The upstream model server sent a broken event frame.") from exc
    headers = message.headers
    kind = headers.get(":event-type") or headers.get(":exception-type")
    payload = loads_object(message.payload) if message.payload else {}
    if not isinstance(kind, str) or payload is None:
        raise UpstreamError("The upstream model server sent an event it did not name.")
    if headers.get(":message-type") == "exception" and not kind.endswith("Exception"):
        kind += "Exception"
    return kind, payload
