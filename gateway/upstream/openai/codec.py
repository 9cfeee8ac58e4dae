"""The ``openai`` dialect's rounds (docs/design.md §10, §20): a round's request as a
chat-completions server reads it (its messages are the values' chat JSON,
``gateway.chat_json``), and its answers, whole or streamed, back into values.

Pure: no I/O. What a server sends is hostile input: a shape the gateway relies on and
does not get is the upstream's fault (``UpstreamError``, a 502).
"""

from __future__ import annotations

import secrets
from typing import Any, TypeVar

from gateway.errors import UpstreamError
from gateway.upstream.exchange import server_failed
from gateway.upstream.numbers import believed_usage
from gateway.values import (
    AssistantMessage,
    ChoiceDelta,
    Completion,
    ToolCall,
)
from tool_registry import dumps_text

T = TypeVar("T")

# ---------------------------------------------------------------- requests


def round_body(
    params: dict[str, Any],
    model: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    stream: bool,
    tool_choice: Any,
) -> dict[str, Any]:
    """The request of one round: the client's parameters, the history so far, the tools
    (None or none: none offered, and no ``tool_choice`` then, which servers refuse
    without tools). Streamed rounds always ask for usage, to sum it."""
    body = dict(params)
    body["model"] = model
    body["messages"] = messages
    if tools:
        body["tools"] = tools
    body["stream"] = stream
    if stream:
        body["stream_options"] = {"include_usage": True}
    else:
        body.pop("stream_options", None)
    if tool_choice is not None and tools:
        body["tool_choice"] = tool_choice
    return body


# ---------------------------------------------------------------- answers


def _typed(value: Any, kind: type[T], what: str) -> T | None:
    """``value`` if it is a ``kind`` or absent (None); anything else is a 502."""
    if value is None or isinstance(value, kind):
        return value
    raise UpstreamError(f"The upstream model server sent a malformed {what}.")


def _present(value: Any, kind: type[T], what: str) -> T:
    found = _typed(value, kind, what)
    if found is None:
        raise UpstreamError(f"The upstream model server sent a stream chunk without {what}.")
    return found


def _new_id() -> str:
    """An id for a call the server sent without one (the history needs one to answer)."""
    return f"call_{secrets.token_hex(12)}"


def _arguments(value: Any) -> str:
    if isinstance(value, dict):  # some servers send an object, not its JSON text
        return dumps_text(value)
    return value if isinstance(value, str) else ""


def parse_call(call: Any) -> ToolCall:
    """A tool call of a message; a call that is not an object is malformed (502)."""
    if not isinstance(call, dict):
        raise UpstreamError("The upstream model server sent malformed tool calls.")
    call_id = call.get("id")
    call_id = call_id if isinstance(call_id, str) and call_id else _new_id()
    if call.get("type") == "custom":
        custom = call.get("custom")
        custom = custom if isinstance(custom, dict) else {}
        name = custom.get("name")
        return ToolCall(
            call_id,
            name if isinstance(name, str) else None,
            _arguments(custom.get("input")),
            "custom",
        )
    function = call.get("function", {})
    if not isinstance(function, dict):
        raise UpstreamError("The upstream model server sent malformed tool calls.")
    name = function.get("name")
    return ToolCall(
        call_id, name if isinstance(name, str) else None, _arguments(function.get("arguments"))
    )


def parse_turn(message: dict[str, Any]) -> AssistantMessage:
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise UpstreamError("The upstream model server sent malformed tool calls.")
    content, refusal = message.get("content"), message.get("refusal")
    return AssistantMessage(
        content if isinstance(content, str) else None,
        tuple(parse_call(call) for call in calls),
        refusal if isinstance(refusal, str) else None,
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def parse_completion(response: dict[str, Any], upstream: str = "") -> Completion:
    """A whole chat completion as a round: its first choice's message (its usage as
    ``numbers.believed_usage`` reads it)."""
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        choice = choices[0]
        message = choice.get("message")
        if isinstance(message, dict):
            finish = choice.get("finish_reason")
            finish = finish if isinstance(finish, str) else None
            return Completion(
                parse_turn(message),
                believed_usage(response.get("usage"), upstream),
                finish,
                response,
                _text(response.get("id")),
                _text(response.get("model")),
                matched_stop(choice, finish),
            )
    raise UpstreamError("The upstream model server answered without a message.")


_FORWARDED = ("content", "refusal")


def matched_stop(choice: dict[str, Any], finish: str | None) -> str | None:
    """The stop sequence a chat round ended at, where the server says it: vLLM's
    ``stop_reason`` (a string; a number is a stop token), SGLang's ``matched_stop``.
    OpenAI's API does not say: its ``stop`` reads as any other end."""
    if finish != "stop":
        return None
    for key in ("stop_reason", "matched_stop"):
        said = choice.get(key)
        if isinstance(said, str) and said:
            return said
    return None


class RoundAssembler:
    """Collects a streamed round's chunks into the round they make up.

    ``add`` returns the pieces to forward at once (content and refusal text, with the
    upstream's logprobs for them); tool-call deltas are only collected, by ``index``:
    the id and name come in the first delta of a call, the arguments in pieces.
    """

    __slots__ = (
        "_calls",
        "_text",
        "finish_reason",
        "id",
        "model",
        "stop_sequence",
        "upstream",
        "usage",
    )

    def __init__(self, upstream: str = "") -> None:
        self.upstream = upstream  # its name, for errors
        self._text: dict[str, list[str]] = {key: [] for key in _FORWARDED}
        self._calls: dict[int, list[Any]] = {}  # index → [id, name, argument pieces]
        self.finish_reason: str | None = None
        self.stop_sequence: str | None = None
        self.usage: dict[str, Any] | None = None
        self.id: str | None = None
        self.model: str | None = None

    def add(self, chunk: dict[str, Any]) -> list[ChoiceDelta]:
        """The deltas of one chunk to forward; a chunk of the wrong shape is the
        upstream's fault (``UpstreamError``, a 502), whatever part of it is wrong."""
        error = chunk.get("error")
        if error is not None:
            message = error.get("message") if isinstance(error, dict) else error
            said = message if isinstance(message, str) else None
            raise server_failed(self.upstream, "an error event in its stream", said)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        if self.id is None:
            self.id, self.model = _text(chunk.get("id")), _text(chunk.get("model"))
        choices = _typed(chunk.get("choices"), list, "stream chunk's choices")
        forward: list[ChoiceDelta] = []
        for choice in choices or ():
            choice = _present(choice, dict, "a choice")
            if choice.get("index", 0) != 0:
                continue
            finish = _typed(choice.get("finish_reason"), str, "stream chunk's finish_reason")
            if finish:
                self.finish_reason = finish
                self.stop_sequence = matched_stop(choice, finish)
            delta = _typed(choice.get("delta"), dict, "stream chunk's delta")
            if delta is None:
                continue
            out = {}
            for key in _FORWARDED:
                text = _typed(delta.get(key), str, f"stream chunk's {key}")
                if text:
                    self._text[key].append(text)
                    out[key] = text
            logprobs = _typed(choice.get("logprobs"), dict, "stream chunk's logprobs")
            if out or logprobs:
                forward.append(ChoiceDelta(out, logprobs))
            for call in _typed(delta.get("tool_calls"), list, "stream chunk's tool_calls") or ():
                self._add_call(_present(call, dict, "a tool call"))
        return forward

    def _add_call(self, delta: dict[str, Any]) -> None:
        index = delta.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            index = len(self._calls)
        call = self._calls.setdefault(index, [None, "", []])
        call_id = _typed(delta.get("id"), str, "stream chunk's tool call id")
        if call_id:
            call[0] = call_id
        function = _typed(delta.get("function"), dict, "stream chunk's tool call function") or {}
        name = _typed(function.get("name"), str, "stream chunk's tool call name")
        if name and name != call[1]:
            call[1] += name
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # some servers send an object, not its JSON text
            arguments = dumps_text(arguments)
        arguments = _typed(arguments, str, "stream chunk's tool call arguments")
        if arguments:
            call[2].append(arguments)

    def round(self) -> Completion:
        """The round the chunks made up."""
        calls = tuple(
            ToolCall(call_id or _new_id(), name or None, "".join(pieces))
            for call_id, name, pieces in (self._calls[i] for i in sorted(self._calls))
        )
        refusal = "".join(self._text["refusal"]) or None
        turn = AssistantMessage("".join(self._text["content"]) or None, calls, refusal)
        usage = believed_usage(self.usage, self.upstream)
        return Completion(
            turn, usage, self.finish_reason, None, self.id, self.model, self.stop_sequence
        )
