"""Server-sent events: an incremental parser and the encodings the gateway sends."""

from __future__ import annotations

from typing import Any

from gateway.errors import UpstreamError
from tool_registry import dumps

DONE = b"data: [DONE]\n\n"
KEEPALIVE = b": keep-alive\n\n"


def encode(payload: Any) -> bytes:
    """One ``data:`` event holding ``payload`` as compact JSON."""
    return b"data: " + dumps(payload) + b"\n\n"


def error_event(envelope: Any) -> bytes:
    """The event that ends a chat-completions stream with an error: ``envelope`` as its
    ``data`` (the OpenAI SDKs raise on a chunk that holds ``error``), named ``error``
    (clients that read only named errors, such as LangChain4j, raise on that, where an
    unnamed chunk they cannot read would end the stream as if it had finished)."""
    return b"event: error\ndata: " + dumps(envelope) + b"\n\n"


MAX_LINE_BYTES = 8 * 1024 * 1024  # one SSE line from an upstream, at most


class SSEParser:
    """Turns a byte stream into the ``data`` of its events, whatever its chunking.

    Lines may end in ``\\n``, ``\\r\\n`` or ``\\r`` (split across chunks too); several
    ``data:`` lines of one event are joined with ``\\n``; comments and other fields
    are skipped. Linear in the stream's length however it is cut: a partial line is
    kept as pieces and joined once its end arrives; a line past ``max_line_bytes``
    is the upstream's fault (``UpstreamError``).
    """

    __slots__ = ("_data", "_max_line", "_pending", "_pending_size", "_skip_lf")

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._pending: list[bytes] = []  # the start of a line whose end has not come
        self._pending_size = 0
        self._max_line = max_line_bytes
        self._data: list[str] = []
        self._skip_lf = False  # the last chunk ended in "\r": a leading "\n" is its pair

    def feed(self, chunk: bytes) -> list[str]:
        if self._skip_lf and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._skip_lf = False
        if not chunk:
            return []
        if b"\n" not in chunk and b"\r" not in chunk:
            self._hold(chunk)
            return []
        if self._pending:
            chunk = b"".join(self._pending) + chunk
            self._pending, self._pending_size = [], 0
        lines = chunk.splitlines(keepends=True)
        last = lines[-1]
        if last.endswith((b"\n", b"\r")):
            self._skip_lf = last.endswith(b"\r")
        else:
            self._hold(lines.pop())
        events: list[str] = []
        for line in lines:
            if len(line) > self._max_line:
                raise _too_long(self._max_line)
            self._line(line.rstrip(b"\r\n"), events)
        return events

    def _hold(self, piece: bytes) -> None:
        self._pending.append(piece)
        self._pending_size += len(piece)
        if self._pending_size > self._max_line:
            raise _too_long(self._max_line)

    def close(self) -> list[str]:
        """The events still held when the stream ends without a last blank line."""
        events: list[str] = []
        if self._pending:
            self._line(b"".join(self._pending), events)
            self._pending, self._pending_size = [], 0
        self._line(b"", events)
        return events

    def _line(self, line: bytes, events: list[str]) -> None:
        if not line:
            if self._data:
                events.append("\n".join(self._data))
                self._data = []
            return
        if line.startswith(b":"):
            return
        name, _, value = line.partition(b":")
        if name == b"data":
            self._data.append(value.removeprefix(b" ").decode("utf-8", errors="replace"))


def _too_long(limit: int) -> UpstreamError:
    return UpstreamError(f"The upstream model server sent an event line over {limit} bytes.")
