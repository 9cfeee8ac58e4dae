"""The loop engine (DESIGN.md §10): one round skeleton for every mode, yielding events.

``rounds`` asks the model server, counts the round, lets ``LoopSession.decide`` say
what comes next and yields what a driver needs to know, in order:

- ``Delta``: text the client may see at once (streamed rounds only);
- ``Working``: work to do before the loop goes on (tools running, or a turn being
  kept before a hand-back) — the driver runs it, with keep-alives if it streams;
- ``HandBack``: the client's own calls, which end the loop;
- ``Final``: the answer, which ends the loop.

The engine sees the engine's values (``values``) only: the upstream dialect
(``dialect``) turns the model server's answers into them. ``ToolLoop.run`` is the
non-streaming driver (it keeps the last event), ``stream_loop`` the streaming one (it
encodes every event); a surface renders what they give in its own wire format.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from gateway.config import UpstreamConfig
from gateway.errors import UpstreamError
from gateway.upstream.dialect import Piece, RoundAssembler, parse_completion
from gateway.values import Round, ToolCall

if TYPE_CHECKING:
    from gateway.engine.loop import LoopSession


class ModelServer(Protocol):
    """What the engine asks a round of: ``UpstreamClient``, or a fake in unit tests."""

    async def chat(self, upstream: UpstreamConfig, body: dict[str, Any]) -> dict[str, Any]: ...

    def chat_stream(
        self, upstream: UpstreamConfig, body: dict[str, Any]
    ) -> AsyncGenerator[dict[str, Any], None]: ...


@dataclass(frozen=True, slots=True)
class Delta:
    piece: Piece


@dataclass(frozen=True, slots=True)
class Working:
    start: Callable[[], Coroutine[Any, Any, None]]  # called by the driver: nothing runs unasked


@dataclass(frozen=True, slots=True)
class HandBack:
    calls: tuple[ToolCall, ...]  # the client's calls, as the client is to see them
    answer: Round  # its turn as kept: the server calls of the same turn included


@dataclass(frozen=True, slots=True)
class Final:
    answer: Round
    finish_reason: str
    dropped: bool  # the model still asked for tools that will not run


Event = Delta | Working | HandBack | Final


async def rounds(model: ModelServer, session: LoopSession, stream: bool) -> AsyncIterator[Event]:
    """One choice's loop, to its end (``HandBack`` or ``Final``)."""
    while True:
        body = session.next_round(stream)
        if stream:
            assembler = RoundAssembler()
            async for piece in _stream_round(model, session, body, assembler):
                yield Delta(piece)
            answer = assembler.round()
        else:
            answer = parse_completion(
                await session.within_deadline(model.chat(session.job.upstream, body))
            )
        step = session.decide(answer)
        turn = answer.turn
        if step.kind == "run_tools":
            yield Working(partial(session.run_tools, turn, step.runnable))
            continue
        if step.kind == "hand_back":
            turn, handed = session.handed(turn, step)
            yield Working(partial(session.hand_back, turn, step, handed))
            session.outcome = HandBack(handed, replace(answer, turn=turn))
            yield session.outcome
            return
        dropped = bool(turn.calls) or answer.finish_reason == "tool_calls"
        finish = "stop" if dropped else answer.finish_reason or "stop"
        session.outcome = Final(answer, finish, bool(turn.calls))
        yield session.outcome
        return


async def _stream_round(
    model: ModelServer, session: LoopSession, body: dict[str, Any], assembler: RoundAssembler
) -> AsyncIterator[Piece]:
    """One streamed round: the pieces to forward, while ``assembler`` collects the rest.
    Every wait, the request's included, is within the request's deadline."""
    chunks = model.chat_stream(session.job.upstream, body)
    try:
        while (chunk := await session.within_deadline(anext(chunks, None))) is not None:
            for piece in assembler.add(chunk):
                yield piece
    finally:
        await chunks.aclose()
    if assembler.finish_reason is None:
        name = session.job.upstream.name
        raise UpstreamError(f"The upstream model server {name!r} ended the stream early.")
