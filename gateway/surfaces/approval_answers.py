"""A client's answers to the approvals it was asked for (docs/design.md §13), read from the
history it sends back, in the chat dialect both surfaces speak to the loop.

Chat: the held call was handed back as a call of the client's ``toolgate_approval``
tool, and the client answers it as a tool result (``{"approve": true|false,
"reason": …}``). Responses: an ``mcp_approval_request`` output item, answered by an
``mcp_approval_response`` input item (``items.to_messages`` turns both into those
chat shapes). Neither is the model's: the approval calls and their answers leave the
history, and the held call they answer runs (or not) when the loop starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from gateway.policy.approval_desk import Answer
from gateway.values import APPROVAL_TOOL, NO_EXTRA, Message, ToolCall
from tool_registry import dumps_text, loads_object

Approvals = dict[str, tuple[str | None, str | None]]  # approval id → the tool, arguments echoed


def _echoed_arguments(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return dumps_text(value)
    return None


def asked_in(messages: Sequence[Message]) -> Approvals:
    """The approvals a history's assistant messages carry (calls of ``toolgate_approval``),
    each with the tool and arguments the client echoes back as the ones it approved."""
    asked: Approvals = {}
    for message in messages:
        if message.role != "assistant":
            continue
        for call in message.calls:
            if call.name != APPROVAL_TOOL or call.kind != "function":
                continue
            echoed = loads_object(call.arguments)
            tool = echoed.get("tool") if echoed is not None else None
            arguments = _echoed_arguments(echoed.get("arguments")) if echoed is not None else None
            asked[call.id] = (tool if isinstance(tool, str) else None, arguments)
    return asked


def _answer(approval_id: str, content: str, echoed: tuple[str | None, str | None]) -> Answer:
    """A tool result as an answer: anything but ``"approve": true`` is a no."""
    said = loads_object(content) or {}
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
    messages: list[Message], asked: Approvals
) -> tuple[list[Message], dict[str, Answer]]:
    """The history without approval calls and their answers, and the answers."""
    answers: dict[str, Answer] = {}
    kept: list[Message] = []
    for message in messages:
        answering = message.call_id
        if message.role == "tool" and answering in asked:
            content = message.content if isinstance(message.content, str) else ""
            answers[answering] = _answer(answering, content, asked[answering])
            continue
        calls = message.calls if message.role == "assistant" else ()
        if any(call.id in asked for call in calls):
            left = tuple(call for call in calls if call.id not in asked)
            if not left and not message.content and not _content_in(message):
                continue
            message = replace(message, calls=left)
        kept.append(message)
    return kept, answers


def _content_in(message: Message) -> bool:
    """Whether a message with no text read has content the gateway does not read."""
    return message.extra is not NO_EXTRA and bool(message.extra.get("content"))


def held_calls(messages: list[Message]) -> tuple[ToolCall, ...]:
    """The calls of the history's last assistant message that no tool result answers,
    when only tool results follow it: the calls held for approval."""
    answered: set[str | None] = set()
    for message in reversed(messages):
        if message.role == "tool":
            answered.add(message.call_id)
            continue
        if message.role != "assistant":
            return ()
        return tuple(
            call for call in message.calls if call.kind == "function" and call.id not in answered
        )
    return ()
