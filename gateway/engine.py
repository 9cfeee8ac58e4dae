"""The loop engine (DESIGN.md §10): one round skeleton for every mode, yielding events.

``rounds`` asks the upstream, counts the round, lets ``LoopSession.decide`` say what
comes next and yields what a driver needs to know, in order:

- ``Delta``: text the client may see at once (streamed rounds only);
- ``Working``: work to do before the loop goes on (tools running, or a turn being
  saved before a hand-back) — the driver runs it, with keep-alives if it streams;
- ``HandBack``: the client's own calls, which end the request;
- ``Final``: the answer, which ends the request.

``ToolLoop.run`` is the non-streaming driver (it keeps the last event), ``stream_loop``
the streaming one (it encodes every event). A round is asked for as a stream or as
one answer; everything else is the same code.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import httpx

from tool_registry.jsonio import dumps, loads_object

from .errors import UpstreamError, UpstreamTimeout
from .event_stream import close_quietly
from .messages import first_message, tool_calls_of
from .sse import SSEParser
from .stream_round import Piece, RoundAssembler
from .upstream import map_status_error, read_all

if TYPE_CHECKING:
    from .tool_loop import LoopSession, ToolLoop


@dataclass(frozen=True, slots=True)
class Delta:
    piece: Piece


@dataclass(frozen=True, slots=True)
class Working:
    start: Callable[[], Coroutine[Any, Any, None]]  # called by the driver: nothing runs unasked


@dataclass(frozen=True, slots=True)
class HandBack:
    calls: list[dict[str, Any]]
    response: dict[str, Any] | None  # the round's completion, when not streamed


@dataclass(frozen=True, slots=True)
class Final:
    response: dict[str, Any] | None  # the round's completion, when not streamed
    finish_reason: str
    dropped: bool  # the model still asked for tools that will not run


Event = Delta | Working | HandBack | Final


async def rounds(loop: ToolLoop, session: LoopSession, stream: bool) -> AsyncIterator[Event]:
    """One choice's loop, to its end (``HandBack`` or ``Final``)."""
    while True:
        body = session.next_round(stream)
        response: dict[str, Any] | None = None
        if stream:
            assembler = RoundAssembler()
            async for piece in _stream_round(loop, session, body, assembler):
                yield Delta(piece)
            usage, message, finish = assembler.usage, assembler.message(), assembler.finish_reason
        else:
            ask = loop.upstream.chat(session.job.upstream, body)
            response = await session.within_deadline(ask)
            usage, message, finish = response.get("usage"), first_message(response), None
        session.count_round(usage)
        calls = tool_calls_of(message)
        step = session.decide(calls)
        if step.kind == "run_tools":
            yield Working(partial(session.run_tools, message, step.runnable))
            continue
        if step.kind == "hand_back":
            handed = session.handed(message, step)
            yield Working(partial(session.hand_back, message, step, handed))
            yield HandBack(handed, response)
            return
        dropped = bool(calls) or finish == "tool_calls"
        yield Final(response, "stop" if dropped else finish or "stop", bool(calls))
        return


async def _stream_round(
    loop: ToolLoop, session: LoopSession, body: dict[str, Any], assembler: RoundAssembler
) -> AsyncIterator[Piece]:
    """One streamed round: the pieces to forward, while ``assembler`` collects the rest."""
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
