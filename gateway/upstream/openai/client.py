"""The ``openai`` dialect's client: chat completions, whole or streamed, over the shared
exchange (retries, keys, error mapping)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any, TypeVar

from gateway.config import UpstreamConfig
from gateway.errors import UpstreamError
from gateway.upstream.exchange import (
    LARGE_ANSWER_BYTES,
    UpstreamClient,
    large_answer_of,
    map_status_error,
    read_all,
    sse_data,
)
from tool_registry import dumps, loads, loads_object

CHAT_PATH = "/chat/completions"


def _completion(upstream: str, data: bytes) -> dict[str, Any]:
    """A chat completion's JSON, parsed, with its choices; else an ``UpstreamError``."""
    try:
        parsed = loads(data)
    except ValueError as exc:
        raise UpstreamError(
            f"The upstream model server {upstream!r} answered with invalid JSON."
        ) from exc
    if not isinstance(parsed, dict) or not isinstance(parsed.get("choices"), list):
        raise UpstreamError(f"The upstream model server {upstream!r} answered without choices.")
    return parsed


T = TypeVar("T")


class OpenAIClient:
    """Sends chat completions to OpenAI-compatible servers."""

    __slots__ = ("_exchange",)

    def __init__(self, exchange: UpstreamClient) -> None:
        self._exchange = exchange

    async def chat(
        self,
        upstream: UpstreamConfig,
        body: dict[str, Any],
        read: Callable[[dict[str, Any]], T],
        trace: Mapping[str, str] | None = None,
    ) -> T:
        """One non-streaming chat completion: the parsed response as ``read`` reads it
        (both off the event loop when it is large), or an ``UpstreamError``."""
        response = await self._exchange.send(upstream, CHAT_PATH, dumps(body), trace=trace)
        data = await read_all(upstream, response)
        if response.status_code >= 300:
            raise map_status_error(upstream.name, response, data)
        if len(data) <= LARGE_ANSWER_BYTES:  # the common case: no coroutine, no thread
            return read(_completion(upstream.name, data))
        return await large_answer_of(upstream.name, data, read, _completion)

    async def chat_stream(
        self,
        upstream: UpstreamConfig,
        body: dict[str, Any],
        trace: Mapping[str, str] | None = None,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """One streamed chat completion: its chunks, parsed, until ``[DONE]`` or the end."""
        response = await self._exchange.send(
            upstream, CHAT_PATH, dumps(body), accept="text/event-stream", trace=trace
        )
        if response.status_code >= 300:
            raise map_status_error(upstream.name, response, await read_all(upstream, response))
        events = sse_data(upstream, response)
        try:
            async for data in events:
                if data == "[DONE]":
                    break
                chunk = loads_object(data)
                if chunk is None:
                    raise UpstreamError("The upstream model server sent an invalid stream event.")
                yield chunk
        finally:
            await events.aclose()
