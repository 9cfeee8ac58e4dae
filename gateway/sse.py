"""Server-sent events: an incremental parser and the encodings the gateway sends."""

from __future__ import annotations

from typing import Any

from tool_registry.jsonio import dumps

DONE = b"data: [DONE]\n\n"
KEEPALIVE = b": keep-alive\n\n"


def encode(payload: Any) -> bytes:
    """One ``data:`` event holding ``payload`` as compact JSON."""
    return b"data: " + dumps(payload) + b"\n\n"


class SSEParser:
    """Turns a byte stream into the ``data`` of its events, whatever its chunking.

    Lines may end in ``\\n``, ``\\r\\n`` or ``\\r`` (split across chunks too); several
    ``data:`` lines of one event are joined with ``\\n``; comments and other fields
    are skipped.
    """

    __slots__ = ("_buffer", "_data", "_skip_lf")

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []
        self._skip_lf = False  # the last chunk ended in "\r": a leading "\n" is its pair

    def feed(self, chunk: bytes) -> list[str]:
        if self._skip_lf and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._skip_lf = False
        if not chunk:
            return []
        lines = (self._buffer + chunk).splitlines(keepends=True)
        last = lines[-1]
        if last.endswith((b"\n", b"\r")):
            self._buffer = b""
            self._skip_lf = last.endswith(b"\r")
        else:
            self._buffer = lines.pop()
        events: list[str] = []
        for line in lines:
            self._line(line.rstrip(b"\r\n"), events)
        return events

    def close(self) -> list[str]:
        """The events still held when the stream ends without a last blank line."""
        events: list[str] = []
        if self._buffer:
            self._line(self._buffer, events)
            self._buffer = b""
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
