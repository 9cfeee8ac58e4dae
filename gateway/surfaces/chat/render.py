"""The chat completion a client receives for a loop (docs/design.md §7).

The answer is the gateway's, not the last round's: its own id and time, the model
the client named, usage summed over every round, one choice per loop. Of what the
upstream sent with the last round it keeps only what describes that answer — the
message's own fields (annotations, audio, reasoning text), the choice's logprobs,
``system_fingerprint`` and ``service_tier`` — and nothing per round that would
contradict the sums (llama.cpp's ``timings``, a round's ``usage``, its id).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.chat_json import call_dict
from gateway.engine.loop import HandBack, LoopEnd

_KEPT = ("system_fingerprint", "service_tier")


def render_completion(
    outcomes: list[LoopEnd],
    model: str,
    usage: Mapping[str, Any],
    completion_id: str,
    created: int,
) -> dict[str, Any]:
    """The completion for the loops of one request, in the order of their choices."""
    response: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [_choice(outcome, index) for index, outcome in enumerate(outcomes)],
    }
    last = outcomes[0].answer.raw or {}
    for key in _KEPT:
        if isinstance(last.get(key), str):
            response[key] = last[key]
    if usage:
        response["usage"] = chat_usage(usage)
    return response


def chat_usage(usage: Mapping[str, Any]) -> Mapping[str, Any]:
    """Usage in OpenAI's chat shape: the cache's written tokens an Anthropic or Bedrock
    upstream reports stay in the metrics and traces, not in ``prompt_tokens_details``
    (OpenAI's has no such field)."""
    details = usage.get("prompt_tokens_details")
    if not isinstance(details, Mapping) or "cache_write_tokens" not in details:
        return usage
    kept = {name: value for name, value in details.items() if name != "cache_write_tokens"}
    return {**usage, "prompt_tokens_details": kept}


def _choice(outcome: LoopEnd, index: int) -> dict[str, Any]:
    """One loop's choice: its last turn, with only the calls the client is to see."""
    raw = outcome.answer.raw or {}
    choices = raw.get("choices")
    upstream = choices[0] if isinstance(choices, list) and choices else {}
    message = dict(upstream.get("message") or {})
    message["role"] = "assistant"
    turn = outcome.answer.turn
    message["content"] = turn.content
    message["refusal"] = turn.refusal
    if isinstance(outcome, HandBack):
        message["tool_calls"] = [call_dict(call) for call in outcome.calls]
        finish = "tool_calls"
    else:
        message.pop("tool_calls", None)
        finish = outcome.finish_reason
    logprobs = upstream.get("logprobs")
    return {
        "index": index,
        "message": message,
        "finish_reason": finish,
        "logprobs": logprobs if isinstance(logprobs, dict) else None,
    }
