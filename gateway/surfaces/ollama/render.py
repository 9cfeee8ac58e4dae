"""What an Ollama client receives (docs/ollama.md): a chat answer as one object, or as
NDJSON lines — each a piece of the message, the last ``done: true`` with the counts —
and errors as ``{"error": "..."}``.

The answer is the gateway's: the model the client named, the summed usage of every round
as Ollama's counts (``prompt_eval_count``, ``eval_count``), the run's time as
``total_duration`` in nanoseconds (the load and evaluation durations are the model
server's to know and are 0). A handed-back turn's calls are ``message.tool_calls`` with
their arguments as objects (an approval a call of the client's ``toolgate_approval``)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from gateway.engine.loop import HandBack, LoopEnd
from gateway.errors import GatewayError
from gateway.upstream.call_ids import echoed_arguments
from gateway.values import APPROVAL_TOOL, ChoiceDelta, ToolCall, UsageCounts
from tool_registry import dumps

_REASONS = {"tool_calls": "stop", "content_filter": "stop"}


def created_at() -> str:
    """Now, as Ollama writes it (RFC 3339, UTC)."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _count(usage: Mapping[str, Any], key: str) -> int:
    value = usage.get(key)
    return value if type(value) is int else 0


def counts(usage: UsageCounts | Mapping[str, Any], started: float) -> dict[str, Any]:
    """The last object's counts and durations."""
    return {
        "total_duration": int((time.perf_counter() - started) * 1e9),
        "load_duration": 0,
        "prompt_eval_count": _count(usage, "prompt_tokens"),
        "prompt_eval_duration": 0,
        "eval_count": _count(usage, "completion_tokens"),
        "eval_duration": 0,
    }


def tool_call(call: ToolCall) -> dict[str, Any]:
    if call.kind == "approval":
        asked = {"tool": call.name, "arguments": echoed_arguments(call.arguments)}
        return {"function": {"name": APPROVAL_TOOL, "arguments": {**asked, "approval_id": call.id}}}
    return {"function": {"name": call.name or "", "arguments": echoed_arguments(call.arguments)}}


def render_chat(
    outcome: LoopEnd, model: str, usage: UsageCounts, started: float, generate: bool = False
) -> dict[str, Any]:
    """The answer of one run, whole (``generate``: as ``/api/generate`` answers, its
    text as ``response``)."""
    turn = outcome.answer.turn
    text = turn.content or turn.refusal or ""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if isinstance(outcome, HandBack):
        message["tool_calls"] = [tool_call(call) for call in outcome.calls]
        reason = "stop"
    else:
        reason = _REASONS.get(outcome.finish_reason, outcome.finish_reason)
    said = {"response": text} if generate else {"message": message}
    return {
        "model": model,
        "created_at": created_at(),
        **said,
        "done": True,
        "done_reason": reason,
        **counts(usage, started),
    }


def line(value: Mapping[str, Any]) -> bytes:
    return dumps(value) + b"\n"


class ChatLines:
    """One answer as NDJSON: a line per piece of text, a line with the calls handed
    back, and (``close``, once the run's usage is known) the ``done`` line."""

    __slots__ = ("_generate", "_model", "_reason", "_started")

    def __init__(self, model: str, started: float, generate: bool = False) -> None:
        self._model = model
        self._started = started
        self._generate = generate  # /api/generate's lines carry ``response`` text
        self._reason = "stop"

    def _line(self, message: dict[str, Any], **more: Any) -> bytes:
        said = {"response": message["content"]} if self._generate else {"message": message}
        return line({"model": self._model, "created_at": created_at(), **said, **more})

    def open(self) -> list[bytes]:
        return []

    def choice_delta(self, delta: ChoiceDelta) -> list[bytes]:
        text = delta.delta.get("content") or delta.delta.get("refusal")
        if not text:
            return []
        return [self._line({"role": "assistant", "content": text}, done=False)]

    def hand_back(self, calls: Sequence[ToolCall]) -> list[bytes]:
        message = {"role": "assistant", "content": "", "tool_calls": [tool_call(c) for c in calls]}
        return [self._line(message, done=False)]

    def final(self, finish_reason: str, stop_sequence: str | None = None) -> list[bytes]:
        self._reason = _REASONS.get(finish_reason, finish_reason)
        return []

    def error(self, exc: GatewayError) -> bytes:
        return line({"error": exc.message})

    def close(self, usage: UsageCounts) -> list[bytes]:
        done = {"done": True, "done_reason": self._reason, **counts(usage, self._started)}
        return [self._line({"role": "assistant", "content": ""}, **done)]
