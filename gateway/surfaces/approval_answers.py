"""A client's answers to the approvals it was asked for (DESIGN.md §13), read from the
history it sends back, in the chat dialect both surfaces speak to the loop.

Chat: the held call was handed back as a call of the client's ``toolgate_approval``
tool, and the client answers it as a tool result (``{"approve": true|false,
"reason": …}``). Responses: an ``mcp_approval_request`` output item, answered by an
``mcp_approval_response`` input item (``items.to_messages`` turns both into those
chat shapes). Neither is the model's: the approval calls and their answers leave the
history, and the held call they answer runs (or not) when the loop starts.
"""

from __future__ import annotations

from typing import Any

from gateway.policy.approval_desk import Answer
from gateway.values import APPROVAL_TOOL, ToolCall
from tool_registry import dumps_text, loads_object

Approvals = dict[str, tuple[str | None, str | None]]  # approval id → the tool, arguments echoed


def _echoed_arguments(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return dumps_text(value)
    return None


def asked_in(messages: list[dict[str, Any]]) -> Approvals:
    """The approvals a history's assistant messages carry (calls of ``toolgate_approval``),
    each with the tool and arguments the client echoes back as the ones it approved."""
    asked: Approvals = {}
    for message in messages:
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        for call in calls if isinstance(calls, list) else []:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or function.get("name") != APPROVAL_TOOL:
                continue
            if not isinstance(call.get("id"), str):
                continue
            raw = function.get("arguments")
            echoed = loads_object(raw) if isinstance(raw, str) else None
            tool = echoed.get("tool") if echoed is not None else None
            arguments = _echoed_arguments(echoed.get("arguments")) if echoed is not None else None
            asked[call["id"]] = (tool if isinstance(tool, str) else None, arguments)
    return asked


def _answer(approval_id: str, content: Any, echoed: tuple[str | None, str | None]) -> Answer:
    """A tool result as an answer: anything but ``"approve": true`` is a no."""
    said = loads_object(content) if isinstance(content, str) else None
    said = said or {}
    reason = said.get("reason")
    tool, arguments = echoed
    return Answer(
        approval_id,
        said.get("approve") is True,
        reason if isinstance(reason, str) else None,
        tool,
        arguments,
    )


def take_answers(
    messages: list[dict[str, Any]], asked: Approvals
) -> tuple[list[dict[str, Any]], dict[str, Answer]]:
    """The history without approval calls and their answers, and the answers."""
    answers: dict[str, Answer] = {}
    kept: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        answering = _id(message.get("tool_call_id"))
        if role == "tool" and answering in asked:
            answers[answering] = _answer(answering, message.get("content"), asked[answering])
            continue
        calls = message.get("tool_calls") if role == "assistant" else None
        if isinstance(calls, list) and any(_call_id(c) in asked for c in calls):
            left = [c for c in calls if _call_id(c) not in asked]
            message = {**message, "tool_calls": left}
            if not left:
                del message["tool_calls"]
                if not message.get("content"):
                    continue
        kept.append(message)
    return kept, answers


def _id(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _call_id(call: Any) -> str | None:
    return _id(call.get("id")) if isinstance(call, dict) else None


def held_calls(messages: list[dict[str, Any]]) -> tuple[ToolCall, ...]:
    """The calls of the history's last assistant message that no tool result answers,
    when only tool results follow it: the calls held for approval."""
    answered: set[str | None] = set()
    for message in reversed(messages):
        role = message.get("role")
        if role == "tool":
            answered.add(_id(message.get("tool_call_id")))
            continue
        if role != "assistant":
            return ()
        calls = message.get("tool_calls")
        found = []
        for call in calls if isinstance(calls, list) else []:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or _call_id(call) in answered:
                continue
            name, arguments = function.get("name"), function.get("arguments")
            if isinstance(call.get("id"), str) and isinstance(name, str):
                found.append(
                    ToolCall(call["id"], name, arguments if isinstance(arguments, str) else "")
                )
        return tuple(found)
    return ()
