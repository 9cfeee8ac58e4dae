"""The streaming driver of the loop engine (DESIGN.md §7, §10): content deltas reach
the client as they arrive, server tool-call deltas never do, keep-alive comments cover
tool runs, and the choices of a request with ``n`` are interleaved."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from typing import Any, Protocol

import anyio

from gateway.engine.loop import Delta, HandBack, Run, ToolLoop, Working
from gateway.errors import GatewayError
from gateway.upstream.sse import KEEPALIVE
from gateway.values import Piece, ToolCall


class EventWriter(Protocol):
    """How a surface encodes the engine's events for its clients (one per choice)."""

    def open(self) -> list[bytes]: ...  # before the first event, once

    def piece(self, piece: Piece) -> list[bytes]: ...

    def hand_back(self, calls: Sequence[ToolCall]) -> list[bytes]: ...

    def final(self, finish_reason: str) -> list[bytes]: ...

    def error(self, exc: GatewayError) -> bytes: ...


logger = logging.getLogger("gateway.stream")


async def stream_loop(
    loop: ToolLoop,
    runs: list[Run],
    writers: Sequence[EventWriter],
    closing: Callable[[], list[bytes]],
    finished: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[bytes]:
    """The client's event stream: one loop per choice (``runs[i]`` written by
    ``writers[i]``), their events as they come, then what ``closing`` gives (the
    surface's last events: summed usage, ``[DONE]``). Errors before the first event
    are raised (the caller answers them as HTTP errors); after it, they are written
    by the first writer. ``finished`` runs at the end, however the stream ends."""
    started = False
    run, writer = runs[0], writers[0]
    try:
        one = len(runs) == 1
        events = _rounds(loop, run, writer) if one else _choices(loop, runs, writers)
        async for event in events:
            started = True
            yield event
        for event in closing():
            yield event
    except GatewayError as exc:
        run.mark_failure(exc)
        if not started:
            raise
        yield writer.error(exc)
    except Exception:
        if not started:
            raise
        logger.exception("stream failed after it started")
        yield writer.error(GatewayError("The gateway failed while streaming."))
    finally:
        if finished is not None:
            with anyio.CancelScope(shield=True):
                await finished()


_END = object()


async def _choices(
    loop: ToolLoop, runs: list[Run], writers: Sequence[EventWriter]
) -> AsyncIterator[bytes]:
    """Every choice's loop at once, their events interleaved as they come; the first
    failure ends them all."""
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=64)

    async def pump(run: Run, writer: EventWriter) -> None:
        try:
            async for event in _rounds(loop, run, writer):
                await queue.put(event)
            await queue.put(_END)
        except Exception as exc:  # handed to the reader, which raises it
            await queue.put(exc)

    tasks = [asyncio.create_task(pump(s, w)) for s, w in zip(runs, writers, strict=True)]
    try:
        running = len(tasks)
        while running:
            item = await queue.get()
            if item is _END:
                running -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.gather(*tasks, return_exceptions=True)


async def _rounds(loop: ToolLoop, run: Run, writer: EventWriter) -> AsyncIterator[bytes]:
    """The streaming driver of one choice: every event of the engine, encoded."""
    async for event in run.events(stream=True):
        for chunk in writer.open():
            yield chunk
        if isinstance(event, Delta):
            chunks = writer.piece(event.piece)
        elif isinstance(event, Working):
            async for beat in _keeping_alive(event.start(), loop.keepalive_s):
                yield beat
            continue
        elif isinstance(event, HandBack):
            chunks = writer.hand_back(event.calls)
        else:
            chunks = writer.final(event.finish_reason)
        for chunk in chunks:
            yield chunk


async def _keeping_alive(
    work: Coroutine[Any, Any, None], keepalive_s: float
) -> AsyncIterator[bytes]:
    """Run ``work`` (the round's tools), sending a keep-alive comment every ``keepalive_s``."""
    task = asyncio.create_task(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=keepalive_s)
            if done:
                break
            yield KEEPALIVE
    finally:
        if not task.done():
            task.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.gather(task, return_exceptions=True)
    task.result()
