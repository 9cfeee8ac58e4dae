"""Fitting long conversations: truncation and compaction, from tables."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.chat_json import decode_messages
from gateway.engine.estimate import estimate_tokens
from gateway.surfaces.responses.context_fit import (
    SUMMARY_PREFIX,
    compact,
    compaction_threshold,
    summary_messages,
    truncate,
)
from gateway.values import Message

pytestmark = pytest.mark.anyio


def user(text: str) -> Message:
    return Message("user", text)


def said(text: str) -> Message:
    return Message("assistant", text)


CALL = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
HISTORY = [
    user("a" * 400),
    *decode_messages(
        [
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "c", "content": "b" * 400},
        ]
    ),
    said("c" * 400),
    user("the newest question"),
]


def test_truncation_drops_the_oldest_and_keeps_calls_with_their_results() -> None:
    assert truncate(HISTORY, 10_000) == HISTORY
    fitted = truncate(HISTORY, estimate_tokens(HISTORY[3:]))
    assert fitted == HISTORY[3:]  # the tool result went with its call
    # However small the budget, the newest user turn stays.
    assert truncate(HISTORY, 1) == HISTORY[4:]


def test_the_estimate_errs_high_for_text() -> None:
    assert estimate_tokens([user("word " * 100)]) >= 100


async def test_compaction_replaces_the_older_turns_with_the_models_summary() -> None:
    asked: list[list[Message]] = []

    async def summarise(messages: list[Message]) -> str:
        asked.append(messages)
        return "facts: a, b, c"

    assert await compact(HISTORY, 10_000, summarise) is None
    assert asked == []
    compacted = await compact(HISTORY, 100, summarise)
    assert compacted == [*summary_messages("facts: a, b, c"), HISTORY[-1]]
    # The summary retells tool output: it stands as a tool result, never a user's words.
    assert [m.role for m in compacted[:2]] == ["assistant", "tool"]
    assert compacted[1].content == SUMMARY_PREFIX + "facts: a, b, c"
    assert asked[0][:4] == HISTORY[:4]  # the model read everything it replaces
    assert asked[0][-1].role == "user"


@pytest.mark.parametrize(
    ("value", "threshold"),
    [
        (None, None),
        ([], None),
        ([{"type": "compaction", "compact_threshold": 2000}], 2000),
        ([{"type": "compaction"}], 0),  # the model's context_tokens decides
    ],
)
def test_compaction_threshold(value: Any, threshold: int | None) -> None:
    assert compaction_threshold(value) == threshold
