"""The tool loop, streamed (DESIGN.md §7): content deltas reach the client as they
arrive, server tool-call deltas never do, and keep-alive comments cover tool runs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import anyio
import httpx

from tool_registry.jsonio import dumps, loads_object

from .chunks import ChunkWriter
from .errors import GatewayError, UpstreamError, UpstreamTimeout
from .event_stream import close_quietly
from .messages import tool_calls_of
from .sse import DONE, KEEPALIVE, SSEParser
from .stream_round import Piece, RoundAssembler
from .tool_loop import LoopSession, ToolLoop
from .upstream import map_status_error, read_all

logger = logging.getLogger("gateway.stream")

T = TypeVar("T")


async def stream_loop(
    loop: ToolLoop,
    sessions: list[LoopSession],
    writers: list[ChunkWriter],
    include_usage: bool,
    finished: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[bytes]:
    """The client's event stream: one loop per choice (``sessions[i]`` written by
    ``writers[i]``), their events as they come, then the summed usage and ``[DONE]``.
    Errors before the first event are raised (the caller answers them as HTTP
    errors); after it, they are sent as an error event. ``finished`` runs at the end,
    however the stream ends."""
    started = False
    session, writer = sessions[0], writers[0]
    try:
        if len(sessions) == 1:
            events = _rounds(loop, session, writer)
        else:
            events = _choices(loop, sessions, writers)
        async for event in events:
            started = True
            yield event
        if include_usage and session.state.usage:
            yield writer.usage(session.state.usage)
        yield DONE
    except GatewayError as exc:
        session.mark_failure(exc)
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
    loop: ToolLoop, sessions: list[LoopSession], writers: list[ChunkWriter]
) -> AsyncIterator[bytes]:
    """Every choice's loop at once, their events interleaved as they come; the first
    failure ends them all."""
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=64)

    async def pump(session: LoopSession, writer: ChunkWriter) -> None:
        try:
            async for event in _rounds(loop, session, writer):
                await queue.put(event)
            await queue.put(_END)
        except Exception as exc:  # handed to the reader, which raises it
            await queue.put(exc)

    tasks = [asyncio.create_task(pump(s, w)) for s, w in zip(sessions, writers, strict=True)]
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


async def _rounds(
    loop: ToolLoop, session: LoopSession, writer: ChunkWriter
) -> AsyncIterator[bytes]:
    """One choice's loop, to its ``finish_reason``."""
    while True:
        body = session.next_round(stream=True)
        assembler = RoundAssembler()
        async for piece in _stream_round(loop, session, body, assembler):
            yield writer.delta(piece.delta, logprobs=piece.logprobs)
        session.count_round(assembler.usage)
        message = assembler.message()
        calls = tool_calls_of(message)
        step = session.decide(calls)
        if step.kind == "run_tools":
            tools = session.run_tools(message, step.runnable)
            async for beat in _keeping_alive(tools, loop.keepalive_s):
                yield beat
            continue
        if step.kind == "hand_back":
            handed = session.handed(message, step)
            hidden = session.hand_back(message, step, handed)
            async for beat in _keeping_alive(hidden, loop.keepalive_s):
                yield beat
            yield writer.tool_calls(handed)
            yield writer.finish("tool_calls")
        else:
            dropped = bool(calls) or assembler.finish_reason == "tool_calls"
            yield writer.finish("stop" if dropped else assembler.finish_reason or "stop")
        return


async def _stream_round(
    loop: ToolLoop, session: LoopSession, body: dict[str, Any], assembler: RoundAssembler
) -> AsyncIterator[Piece]:
    """One upstream round: the pieces to forward, while ``assembler`` collects the rest."""
    upstream = session.job.upstream
    send = loop.upstream.send(
        upstream, "/chat/completions", dumps(body), accept="text/event-stream"
    )
    response = await session.within_deadline(send)
    if response.status_code >= 300:
        raise map_status_error(upstream.name, response, await read_all(upstream, response))
    try:
        parser = SSEParser()
        chunks = response.aiter_raw().__aiter__()
        while True:
            raw = await session.within_deadline(anext(chunks, None))
            for data in parser.feed(raw) if raw is not None else parser.close():
                if data == "[DONE]":
                    raw = None
                    break
                for piece in assembler.add(_parse(data)):
                    yield piece
            if raw is None:
                break
    except httpx.TimeoutException as exc:
        raise UpstreamTimeout(f"The upstream model server {upstream.name!r} stalled.") from exc
    except httpx.TransportError as exc:
        raise UpstreamError(
            f"The upstream model server {upstream.name!r} broke off its answer."
        ) from exc
    finally:
        await close_quietly(response)
    if assembler.finish_reason is None:
        raise UpstreamError(f"The upstream model server {upstream.name!r} ended the stream early.")


def _parse(data: str) -> dict[str, Any]:
    chunk = loads_object(data)
    if chunk is None:
        raise UpstreamError("The upstream model server sent an invalid stream event.")
    return chunk


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
