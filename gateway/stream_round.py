"""Assembling one streamed upstream round (pure: fed parsed chunks, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from tool_registry.jsonio import dumps_text

from .errors import UpstreamError

T = TypeVar("T")


def _typed(value: Any, kind: type[T], what: str) -> T | None:
    """``value`` if it is a ``kind`` or absent (None); anything else is a 502."""
    if value is None or isinstance(value, kind):
        return value
    raise UpstreamError(f"The upstream model server sent a stream chunk with a malformed {what}.")


def _present(value: Any, kind: type[T], what: str) -> T:
    found = _typed(value, kind, what)
    if found is None:
        raise UpstreamError(f"The upstream model server sent a stream chunk without {what}.")
    return found


_FORWARDED = ("content", "refusal")


@dataclass(frozen=True, slots=True)
class Piece:
    """What a chunk has for the client: text deltas, and their logprobs if sent."""

    delta: dict[str, Any]
    logprobs: dict[str, Any] | None = None


class RoundAssembler:
    """Collects a round's deltas into the assistant message they make up.

    ``add`` returns the pieces to forward at once (content and refusal text, with the
    upstream's logprobs for them); tool-call
    deltas are only collected, by ``index``: the id and name come in the first delta
    of a call, the arguments in pieces.
    """

    __slots__ = ("_calls", "_text", "finish_reason", "usage")

    def __init__(self) -> None:
        self._text: dict[str, list[str]] = {key: [] for key in _FORWARDED}
        self._calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None

    def add(self, chunk: dict[str, Any]) -> list[Piece]:
        """The deltas of one chunk to forward; a chunk of the wrong shape is the
        upstream's fault (``UpstreamError``, a 502), whatever part of it is wrong."""
        error = chunk.get("error")
        if error is not None:
            message = error.get("message") if isinstance(error, dict) else error
            raise UpstreamError(f"The upstream model server failed mid-stream: {message!s:.1000}")
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        choices = _typed(chunk.get("choices"), list, "choices")
        forward: list[Piece] = []
        for choice in choices or ():
            choice = _present(choice, dict, "a choice")
            if choice.get("index", 0) != 0:
                continue
            finish = _typed(choice.get("finish_reason"), str, "finish_reason")
            if finish:
                self.finish_reason = finish
            delta = _typed(choice.get("delta"), dict, "delta")
            if delta is None:
                continue
            out = {}
            for key in _FORWARDED:
                text = _typed(delta.get(key), str, key)
                if text:
                    self._text[key].append(text)
                    out[key] = text
            logprobs = _typed(choice.get("logprobs"), dict, "logprobs")
            if out or logprobs:
                forward.append(Piece(out, logprobs))
            for call in _typed(delta.get("tool_calls"), list, "tool_calls") or ():
                self._add_call(_present(call, dict, "a tool call"))
        return forward

    def _add_call(self, delta: dict[str, Any]) -> None:
        index = delta.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            index = len(self._calls)
        call = self._calls.setdefault(
            index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
        )
        call_id = _typed(delta.get("id"), str, "a tool call id")
        if call_id:
            call["id"] = call_id
        function = _typed(delta.get("function"), dict, "a tool call's function") or {}
        name = _typed(function.get("name"), str, "a tool call's name")
        if name and name != call["function"]["name"]:
            call["function"]["name"] += name
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # some servers send an object, not its JSON text
            arguments = dumps_text(arguments)
        arguments = _typed(arguments, str, "a tool call's arguments")
        if arguments:
            call["function"]["arguments"] += arguments

    def message(self) -> dict[str, Any]:
        """The assistant message of the round."""
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(self._text["content"]) or None,
        }
        if self._text["refusal"]:
            message["refusal"] = "".join(self._text["refusal"])
        if self._calls:
            message["tool_calls"] = [self._calls[i] for i in sorted(self._calls)]
        return message
