"""Shaping the messages and completions that pass through the loop."""

from __future__ import annotations

from typing import Any

from tool_registry.jsonio import dumps_text

from .errors import UpstreamError


def first_message(response: dict[str, Any]) -> dict[str, Any]:
    """The assistant message of the first choice, or an ``UpstreamError``."""
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message")
        if isinstance(message, dict):
            return message
    raise UpstreamError("The upstream model server answered without a message.")


def tool_calls_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The message's tool calls; a malformed list is the upstream's fault (502)."""
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list) or not all(
        isinstance(c, dict) and isinstance(c.get("function", {}), dict) for c in calls
    ):
        raise UpstreamError("The upstream model server sent malformed tool calls.")
    return calls


def assistant_turn(message: dict[str, Any]) -> dict[str, Any]:
    """The assistant's tool-calling message as it goes back into the history.

    Only the fields every server accepts: no ``refusal``, reasoning or audio fields.
    """
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments") or "{}"
        if not isinstance(arguments, str):
            arguments = dumps_text(arguments)
        calls.append(
            {
                "id": call.get("id"),
                "type": call.get("type", "function"),
                "function": {"name": function.get("name"), "arguments": arguments},
            }
        )
    return {"role": "assistant", "content": message.get("content"), "tool_calls": calls}


def tool_turn(call_id: Any, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def keep_calls(response: dict[str, Any], calls: list[dict[str, Any]]) -> None:
    """Leave only ``calls`` in the first choice (none: a plain answer, ``stop``)."""
    choice = response["choices"][0]
    message = choice["message"]
    if calls:
        message["tool_calls"] = calls
        choice["finish_reason"] = "tool_calls"
    else:
        message.pop("tool_calls", None)
        choice["finish_reason"] = "stop"


def finalize(response: dict[str, Any], model: str, usage: dict[str, Any]) -> dict[str, Any]:
    """The completion the client receives: its model name, summed usage, and the fields
    OpenAI's schema requires that some servers leave out."""
    response["model"] = model
    response.setdefault("object", "chat.completion")
    if usage:
        response["usage"] = usage
    for choice in response.get("choices", []):
        if isinstance(choice, dict):
            choice.setdefault("logprobs", None)
            message = choice.get("message")
            if isinstance(message, dict):
                message.setdefault("refusal", None)
                message.setdefault("content", None)
                if not message.get("tool_calls"):
                    message.pop("tool_calls", None)
    return response
