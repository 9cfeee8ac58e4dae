"""Fitting a long conversation to the model (docs/design.md §11): ``truncation: "auto"``
drops the oldest messages, ``context_management`` compaction replaces them with a
summary the same model writes.

The summary stands where tool output stands: a tool call the gateway made and its
result, never a user or system message. It retells what tools answered, and a tool's
words must not gain the user's authority by being summarised.

Tokens are estimated, not counted: the gateway has no tokenizer for every model an
upstream may serve. The estimate (a token per four characters of JSON, plus a few per
message) errs high for English text, so a fitted conversation fits.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from gateway.engine.estimate import estimate_tokens
from gateway.values import NULL_CONTENT, Message, ToolCall

SUMMARY_TOOL = "toolgate_conversation_summary"
SUMMARY_PREFIX = "Summary of the earlier conversation (written when it was compacted):\n"
_SUMMARY_ASK = (
    "Summarise the conversation above for your own later use: every fact, name, number, "
    "decision and open question a later answer could need, tersely, in the language of "
    "the conversation. Write only the summary."
)


def _cut(messages: list[Message], start: int) -> int:
    """The first index at or after ``start`` that begins a whole exchange: never a tool
    result whose call would be gone."""
    while start < len(messages) and messages[start].role == "tool":
        start += 1
    return start


def _last_user(messages: list[Message]) -> int:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            return index
    return len(messages)


def truncate(messages: list[Message], budget: int) -> list[Message]:
    """The newest messages that fit ``budget`` tokens, dropping from the oldest; never
    the newest user turn and what follows it. ``messages`` holds no instructions."""
    keep_from = _last_user(messages)
    start = 0
    while start < keep_from and estimate_tokens(messages[start:]) > budget:
        start = _cut(messages, start + 1)
    return messages[min(start, keep_from) :]


Summarise = Callable[[list[Message]], Awaitable[str]]


async def compact(
    messages: list[Message], threshold: int, summarise: Summarise
) -> list[Message] | None:
    """Past ``threshold`` tokens: everything before the newest user turn replaced by one
    summary message (``summarise`` asks the model), or None when under it or there is
    nothing older to replace."""
    if estimate_tokens(messages) <= threshold:
        return None
    keep_from = _last_user(messages)
    older = messages[:keep_from]
    if not older:
        return None
    summary = await summarise([*older, Message("user", _SUMMARY_ASK)])
    return [*summary_messages(summary), *messages[keep_from:]]


def summary_messages(summary: str) -> list[Message]:
    """A summary as the result of a call to ``SUMMARY_TOOL`` (see the module's note)."""
    call = ToolCall("call_toolgate_summary", SUMMARY_TOOL, "{}")
    return [
        Message("assistant", None, (call,), extra=NULL_CONTENT),
        Message("tool", SUMMARY_PREFIX + summary, call_id=call.id),
    ]


def compaction_threshold(context_management: Any) -> int | None:
    """The ``compact_threshold`` of a ``compaction`` entry, if the request has one."""
    if not isinstance(context_management, list):
        return None
    for entry in context_management:
        if isinstance(entry, dict) and entry.get("type") == "compaction":
            threshold = entry.get("compact_threshold")
            return threshold if isinstance(threshold, int) and threshold > 0 else 0
    return None
