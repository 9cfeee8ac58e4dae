"""A run's event stream, encoded by its surface (docs/design.md §7, §10): the engine yields
typed events (``engine.stream``), a surface's ``EventWriter`` turns each into its wire
format's bytes, and the request's end (``RequestEnd``) is left whichever way the
stream ends."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from gateway.engine.loop import HandBack, Run, ToolLoop
from gateway.engine.report import RunReport
from gateway.engine.stream import Beat, Streamed, stream_events
from gateway.errors import GatewayError
from gateway.surfaces.request_end import RequestEnd
from gateway.upstream.sse import KEEPALIVE
from gateway.values import ChoiceDelta, ToolCall
from tool_registry import immutable

logger = logging.getLogger("gateway.stream")


class EventWriter(Protocol):
    """How a surface encodes the engine's events for its clients (one per choice)."""

    def open(self) -> list[bytes]: ...  # before the first event; empty after that

    def choice_delta(self, delta: ChoiceDelta) -> list[bytes]: ...

    def hand_back(self, calls: Sequence[ToolCall]) -> list[bytes]: ...

    def final(self, finish_reason: str, stop_sequence: str | None = None) -> list[bytes]: ...

    def error(self, exc: GatewayError) -> bytes: ...


@immutable
class Framing:
    """How a surface's stream is framed: its media type, what a wait sends (``keepalive``,
    nothing if empty), and whether the run's report goes as comment lines before the
    last events (SSE's ``: x-toolgate-…``; a line reader of JSON has no comments)."""

    media_type: str
    keepalive: bytes
    comments: bool


SSE = Framing("text/event-stream", KEEPALIVE, True)
NDJSON = Framing("application/x-ndjson", b"", False)  # one JSON object a line (Ollama's)


class StreamEncoder(Protocol):
    """A surface's encoding of one request's event stream: its framing, a writer per
    choice, and the stream's last events once the run's report is known (summed usage,
    ``[DONE]``)."""

    @property
    def framing(self) -> Framing: ...

    @property
    def choices(self) -> Sequence[EventWriter]: ...

    async def close(self, report: RunReport) -> list[bytes]:
        """The last events, once the run is over (what the surface keeps, kept first)."""
        ...


def encode(writer: EventWriter, event: Streamed, keepalive: bytes = KEEPALIVE) -> list[bytes]:
    """One event of the engine as ``writer`` writes it (a wait as ``keepalive``)."""
    chunks = writer.open()
    if isinstance(event, ChoiceDelta):
        chunks += writer.choice_delta(event)
    elif isinstance(event, Beat):
        if event.alive and keepalive:
            chunks.append(keepalive)
    elif isinstance(event, HandBack):
        chunks += writer.hand_back(event.calls)
    else:
        chunks += writer.final(event.finish_reason, event.answer.stop_sequence)
    return chunks


def loop_comment(report: RunReport) -> bytes:
    """The report's headers for a stream, whose headers were sent before they were
    known: SSE comment lines before the surface's last events (``: x-toolgate-
    iterations: 2``), which every SSE parser skips and a client that wants them reads."""
    lines = [f": {name}: {value}\n" for name, value in report.headers().items()]
    return "".join(lines).encode() + b"\n"


async def event_stream(
    loop: ToolLoop, runs: list[Run], encoder: StreamEncoder, end: RequestEnd
) -> AsyncIterator[bytes]:
    """The client's event stream: every choice's events (``runs[i]`` written by the
    encoder's ``choices[i]``), then the report's comment and the encoder's last events.
    A failure before the first event is raised (the caller answers it as an HTTP
    error); after it, it is written by the first writer. ``end`` is left however the
    stream ends."""
    writers, framing = encoder.choices, encoder.framing
    async with end:
        started = False
        try:
            async for index, event in stream_events(loop, runs):
                for chunk in encode(writers[index], event, framing.keepalive):
                    started = True
                    yield chunk
            report = end.finish()
            if framing.comments:
                yield loop_comment(report)
            for chunk in await encoder.close(report):
                yield chunk
        except GatewayError as exc:
            if not started:
                raise
            end.failed(exc)
            yield writers[0].error(exc)
        except Exception as exc:
            if not started:
                raise
            logger.exception("stream failed after it started")
            end.failed(exc)
            yield writers[0].error(GatewayError("The gateway failed while streaming."))
