"""What a Claude client receives (docs/claude.md): a Messages answer — whole, or as the
API's event stream — written from the run's values, and errors in Anthropic's shape.

The answer is the gateway's: its own id, the model the client named, usage summed over
every round (in Messages' names: the input less what the cache read or wrote, each of
those apart). Thinking is shown only to a client that asked for it, whole, before the
text; a handed-back turn's calls are ``tool_use`` blocks (an approval a call of the
client's ``toolgate_approval`` tool)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gateway.engine.loop import HandBack, LoopEnd
from gateway.errors import GatewayError
from gateway.values import APPROVAL_TOOL, AssistantMessage, ChoiceDelta, ToolCall, UsageCounts
from tool_registry import dumps, loads_object

_STOPS = {"stop": "end_turn", "length": "max_tokens", "content_filter": "refusal"}
# An error's status as Messages names its kind.
_KINDS = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def stop_reason(finish: str, stop_sequence: str | None = None) -> str:
    if finish == "stop" and stop_sequence is not None:
        return "stop_sequence"
    return "tool_use" if finish == "tool_calls" else _STOPS.get(finish, "end_turn")


def _sequence(stop: str, stop_sequence: str | None, asked: Sequence[str]) -> str | None:
    """Messages' ``stop_sequence``: the one matched, where the upstream said which and
    it is one the client ``asked`` for (an upstream's other words are not passed on)."""
    if stop != "stop_sequence" or stop_sequence not in asked:
        return None
    return stop_sequence


def _count(usage: Mapping[str, Any], key: str) -> int:
    value = usage.get(key)
    return value if type(value) is int else 0


def usage_of(usage: UsageCounts | Mapping[str, Any]) -> dict[str, int]:
    """The gateway's summed usage (chat's names) in Messages' names."""
    details = usage.get("prompt_tokens_details")
    details = details if isinstance(details, dict) else {}
    read, wrote = _count(details, "cached_tokens"), _count(details, "cache_write_tokens")
    prompt = _count(usage, "prompt_tokens") or _count(usage, "input_tokens")
    answer = _count(usage, "completion_tokens") or _count(usage, "output_tokens")
    return {
        "input_tokens": max(prompt - read - wrote, 0),
        "output_tokens": answer,
        "cache_creation_input_tokens": wrote,
        "cache_read_input_tokens": read,
    }


def tool_use(call: ToolCall) -> dict[str, Any]:
    """A call handed back, as a ``tool_use`` block."""
    if call.kind == "approval":
        asked = {"tool": call.name, "arguments": loads_object(call.arguments) or {}}
        given: Any = {**asked, "approval_id": call.id}
        return {"type": "tool_use", "id": call.id, "name": APPROVAL_TOOL, "input": given}
    if call.kind == "custom":
        given = {"input": call.arguments}
    else:
        given = loads_object(call.arguments) if call.arguments.strip() else {}
        given = given if given is not None else {}
    return {"type": "tool_use", "id": call.id, "name": call.name or "", "input": given}


def _text(turn: AssistantMessage) -> str | None:
    return turn.refusal if turn.refusal is not None else turn.content


_SHOWN = frozenset({"thinking", "redacted_thinking"})


def render_message(
    outcome: LoopEnd,
    model: str,
    usage: UsageCounts,
    message_id: str,
    thinking: bool,
    stops: Sequence[str] = (),
) -> dict[str, Any]:
    """The answer of one run (``stops``: the client's stop sequences)."""
    turn = outcome.answer.turn
    # Anthropic's thinking blocks, where the client asked for thinking; another dialect's
    # carried blocks (Bedrock's reasoningContent) are carried, never shown.
    content = [dict(b) for b in turn.carried if b.get("type") in _SHOWN] if thinking else []
    said = _text(turn)
    if said:
        content.append({"type": "text", "text": said})
    if isinstance(outcome, HandBack):
        content.extend(tool_use(call) for call in outcome.calls)
        stop = "tool_use"
    else:
        stop = stop_reason(outcome.finish_reason, outcome.answer.stop_sequence)
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": _sequence(stop, outcome.answer.stop_sequence, stops),
        "usage": usage_of(usage),
    }


def error_body(exc: GatewayError, request_id: str) -> dict[str, Any]:
    kind = _KINDS.get(exc.status, "api_error" if exc.status >= 500 else "invalid_request_error")
    return {
        "type": "error",
        "error": {"type": kind, "message": exc.message},
        "request_id": request_id,
    }


def event(kind: str, data: Mapping[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + dumps({"type": kind, **data}) + b"\n\n"


class MessageEvents:
    """One answer's event stream, in the API's order: ``message_start``; each block's
    start, deltas and stop (text as it comes; a handed-back call whole, its input in
    one ``input_json_delta``); then, once the run's usage is known (``close``),
    ``message_delta`` with the stop reason and usage, and ``message_stop``."""

    __slots__ = ("_asked", "_blocks", "_id", "_model", "_open", "_sequence", "_started", "_stop")

    def __init__(self, message_id: str, model: str, stops: Sequence[str] = ()) -> None:
        self._asked = stops  # the client's stop sequences
        self._id = message_id
        self._model = model
        self._started = False
        self._blocks = 0  # blocks started so far
        self._open = False  # a text block is open
        self._stop = "end_turn"
        self._sequence: str | None = None

    def open(self) -> list[bytes]:
        if self._started:
            return []
        self._started = True
        message: dict[str, Any] = {
            "id": self._id,
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return [event("message_start", {"message": message})]

    def _close_text(self) -> list[bytes]:
        if not self._open:
            return []
        self._open = False
        return [event("content_block_stop", {"index": self._blocks - 1})]

    def choice_delta(self, delta: ChoiceDelta) -> list[bytes]:
        text = delta.delta.get("content") or delta.delta.get("refusal")
        if not text:
            return []
        chunks = []
        if not self._open:
            self._open = True
            start = {"index": self._blocks, "content_block": {"type": "text", "text": ""}}
            self._blocks += 1
            chunks.append(event("content_block_start", start))
        piece = {"type": "text_delta", "text": text}
        chunks.append(event("content_block_delta", {"index": self._blocks - 1, "delta": piece}))
        return chunks

    def hand_back(self, calls: Sequence[ToolCall]) -> list[bytes]:
        chunks = self._close_text()
        for call in calls:
            block = tool_use(call)
            index = self._blocks
            self._blocks += 1
            opened = {**block, "input": {}}
            piece = {"type": "input_json_delta", "partial_json": dumps(block["input"]).decode()}
            chunks.append(event("content_block_start", {"index": index, "content_block": opened}))
            chunks.append(event("content_block_delta", {"index": index, "delta": piece}))
            chunks.append(event("content_block_stop", {"index": index}))
        self._stop = "tool_use"
        return chunks

    def final(self, finish_reason: str, stop_sequence: str | None = None) -> list[bytes]:
        self._stop = stop_reason(finish_reason, stop_sequence)
        self._sequence = _sequence(self._stop, stop_sequence, self._asked)
        return self._close_text()

    def error(self, exc: GatewayError) -> bytes:
        return event("error", {"error": error_body(exc, "")["error"]})

    # The encoder's part of ``surfaces.streaming.StreamEncoder`` (one choice).

    @property
    def choices(self) -> Sequence[MessageEvents]:
        return [self]

    def close(self, usage: UsageCounts) -> list[bytes]:
        delta = {"stop_reason": self._stop, "stop_sequence": self._sequence}
        return [
            event("message_delta", {"delta": delta, "usage": usage_of(usage)}),
            event("message_stop", {}),
        ]
