"""Fitting a long conversation to the model (DESIGN.md §11): ``truncation: "auto"``
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

from tool_registry import dumps

_PER_MESSAGE = 4
SUMMARY_TOOL = "toolgate_conversation_summary"
SUMMARY_PREFIX = "Summary of the earlier conversation (written when it was compacted):\n"
_SUMMARY_ASK = (
    "Summarise the conversation above for your own later use: every fact, name, number, "
    "decision and open question a later answer could need, tersely, in the language of "
    "the conversation. Write only the summary."
)


def estimate_tokens(messages: list[dict[str, Any]]) -> int:
    return sum(len(dumps(message)) // 4 + _PER_MESSAGE for message in messages)


def _cut(messages: list[dict[str, Any]], start: int) -> int:
    """The first index at or after ``start`` that begins a whole exchange: never a tool
    result whose call would be gone."""
    while start < len(messages) and messages[start].get("role") == "tool":
        start += 1
    return start


def _last_user(messages: list[dict[str, Any]]) -> int:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            return index
    return len(messages)


def truncate(messages: list[dict[str, Any]], budget: int) -> list[dict[str, Any]]:
    """The newest messages that fit ``budget`` tokens, dropping from the oldest; never
    the newest user turn and what follows it. ``messages`` holds no instructions."""
    keep_from = _last_user(messages)
    start = 0
    while start < keep_from and estimate_tokens(messages[start:]) > budget:
        start = _cut(messages, start + 1)
    return messages[min(start, keep_from) :]


Summarise = Callable[[list[dict[str, Any]]], Awaitable[str]]


async def compact(
    messages: list[dict[str, Any]], threshold: int, summarise: Summarise
) -> list[dict[str, Any]] | None:
    """Past ``threshold`` tokens: everything before the newest user turn replaced by one
    summary message (``summarise`` asks the model), or None when under it or there is
    nothing older to replace."""
    if estimate_tokens(messages) <= threshold:
        return None
    keep_from = _last_user(messages)
    older = messages[:keep_from]
    if not older:
        return None
    summary = await summarise([*older, {"role": "user", "content": _SUMMARY_ASK}])
    return [*summary_messages(summary), *messages[keep_from:]]


def summary_messages(summary: str) -> list[dict[str, Any]]:
    """A summary as the result of a call to ``SUMMARY_TOOL`` (see the module's note)."""
    call_id = "call_toolgate_summary"
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": SUMMARY_TOOL, "arguments": "{}"},
    }
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": SUMMARY_PREFIX + summary},
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
