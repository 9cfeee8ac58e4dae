"""Sending an event stream to the client, and noticing when the client goes away."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

STREAM_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


class EventStreamResponse(StreamingResponse):
    """A streamed response (``text/event-stream``, or a surface's own framing) that stops
    producing when the client disconnects.

    Starlette watches for the disconnect only under some ASGI spec versions; this does
    it always, so a client that leaves cancels the upstream call and running tools.
    """

    media_type = "text/event-stream"
    on_close: Callable[[], Awaitable[None]] | None = None  # runs once the stream is over
    completed = False  # every event was sent: the client did not leave first

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._stream(receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                # Each is let go once run: ``on_close`` holds this response and the
                # request's exchange (its report), a cycle otherwise.
                source, self.source = self.source, None
                if source is not None:  # its producer's end comes before ``on_close``
                    await source.aclose()
                on_close, self.on_close = self.on_close, None
                if on_close is not None:
                    await on_close()

    source: AsyncGenerator[bytes, None] | None = None  # the producer, if it is a generator

    async def discard(self) -> None:
        """End a stream that will never be sent: its producer's cleanup runs now."""
        if self.source is not None:
            with anyio.CancelScope(shield=True):
                await self.source.aclose()

    async def _stream(self, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as group:

            async def produce() -> None:
                # A send failing because the connection is gone is as good as a disconnect.
                with contextlib.suppress(OSError):
                    await self.stream_response(send)
                    self.completed = True
                group.cancel_scope.cancel()

            group.start_soon(produce)
            await self.listen_for_disconnect(receive)
            group.cancel_scope.cancel()


async def _chain(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    yield first
    async for item in rest:
        yield item


async def start_event_stream(
    events: AsyncIterator[bytes],
    first_byte: Callable[[], None] | None = None,
    media_type: str = "text/event-stream",
) -> EventStreamResponse:
    """Wait for the first event before answering, so that anything failing before it is
    still an ordinary HTTP error (raised from here)."""
    first = await anext(events)
    if first_byte is not None:
        first_byte()
    response = EventStreamResponse(
        _chain(first, events), headers=STREAM_HEADERS, media_type=media_type
    )
    if isinstance(events, AsyncGenerator):
        response.source = events
    return response
