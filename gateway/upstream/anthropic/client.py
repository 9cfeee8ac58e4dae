"""The ``anthropic`` dialect's client: ``POST /v1/messages``, whole or streamed, over the
shared exchange, with the key in ``x-api-key`` and the API's version named."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any, TypeVar

from gateway.config import UpstreamConfig
from gateway.errors import UpstreamError
from gateway.upstream.anthropic.codec import VERSION
from gateway.upstream.exchange import (
    LARGE_ANSWER_BYTES,
    UpstreamClient,
    large_answer_of,
    map_status_error,
    read_all,
    sse_data,
    whole_object,
)
from tool_registry import dumps, loads_object, should_retry

MESSAGES_PATH = "/v1/messages"  # under the base URL, as Anthropic's SDKs write it
MODELS_PATH = "/v1/models"
OVERLOADED = 529  # Anthropic's own status for a server too busy now


def api_key(upstream: UpstreamConfig) -> Mapping[str, str]:
    """The headers every Messages request carries: the version (unless the upstream's
    ``headers`` name one), and the key."""
    named = any(name.lower() == "anthropic-version" for name in upstream.headers)
    headers = {} if named else {"anthropic-version": VERSION}
    if upstream.api_key is not None and upstream.api_key.get_secret_value():
        headers["x-api-key"] = upstream.api_key.get_secret_value()
    return headers


def retryable(status: int, headers: Mapping[str, str]) -> bool:
    """What Anthropic's SDKs try again: an overloaded server too (529)."""
    return status == OVERLOADED or should_retry(status, headers)


T = TypeVar("T")


class AnthropicClient:
    """Sends Messages requests."""

    __slots__ = ("_exchange",)

    def __init__(self, exchange: UpstreamClient) -> None:
        self._exchange = exchange

    async def message(
        self,
        upstream: UpstreamConfig,
        body: dict[str, Any],
        read: Callable[[dict[str, Any]], T],
        trace: Mapping[str, str] | None = None,
    ) -> T:
        """One answer, whole: the parsed message as ``read`` reads it, or an
        ``UpstreamError``."""
        response = await self._exchange.send(upstream, MESSAGES_PATH, dumps(body), trace=trace)
        data = await read_all(upstream, response)
        if response.status_code >= 300:
            raise map_status_error(upstream.name, response, data)
        if len(data) <= LARGE_ANSWER_BYTES:  # the common case: no coroutine, no thread
            return read(whole_object(upstream.name, data))
        return await large_answer_of(upstream.name, data, read)

    async def message_stream(
        self, upstream: UpstreamConfig, body: dict[str, Any], trace: Mapping[str, str] | None = None
    ) -> AsyncGenerator[dict[str, Any], None]:
        """One streamed answer: its events, parsed, as they come."""
        response = await self._exchange.send(
            upstream, MESSAGES_PATH, dumps(body), accept="text/event-stream", trace=trace
        )
        if response.status_code >= 300:
            raise map_status_error(upstream.name, response, await read_all(upstream, response))
        events = sse_data(upstream, response)
        try:
            async for data in events:
                event = loads_object(data)
                if event is None:
                    raise UpstreamError("The upstream model server sent an invalid stream event.")
                yield event
        finally:
            await events.aclose()
