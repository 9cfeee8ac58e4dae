"""Assembling one streamed upstream round (pure: fed parsed chunks, no I/O)."""

from __future__ import annotations

from typing import Any

from .errors import UpstreamError

_FORWARDED = ("content", "refusal")


class RoundAssembler:
    """Collects a round's deltas into the assistant message they make up.

    ``add`` returns the deltas to forward at once (content and refusal text); tool-call
    deltas are only collected, by ``index``: the id and name come in the first delta
    of a call, the arguments in pieces.
    """

    __slots__ = ("_calls", "_text", "finish_reason", "usage")

    def __init__(self) -> None:
        self._text: dict[str, list[str]] = {key: [] for key in _FORWARDED}
        self._calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None

    def add(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        error = chunk.get("error")
        if error is not None:
            message = error.get("message") if isinstance(error, dict) else str(error)
            raise UpstreamError(f"The upstream model server failed mid-stream: {message}")
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        forward: list[dict[str, Any]] = []
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                continue
            out = {}
            for key in _FORWARDED:
                text = delta.get(key)
                if isinstance(text, str) and text:
                    self._text[key].append(text)
                    out[key] = text
            if out:
                forward.append(out)
            for call in delta.get("tool_calls") or ():
                if isinstance(call, dict):
                    self._add_call(call)
        return forward

    def _add_call(self, delta: dict[str, Any]) -> None:
        index = delta.get("index")
        if not isinstance(index, int):
            index = len(self._calls)
        call = self._calls.setdefault(
            index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if delta.get("id"):
            call["id"] = delta["id"]
        function = delta.get("function") or {}
        name = function.get("name")
        if isinstance(name, str) and name and name != call["function"]["name"]:
            call["function"]["name"] += name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
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
