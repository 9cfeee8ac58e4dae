"""A round's prompt in tokens, guessed before the upstream counts it (for budgets,
docs/design.md §13).

The first round's is the size of what it sends (the visible history and the tools)
over ``BYTES_PER_TOKEN``: about three bytes of JSON per token errs high for prose and
code, so a reservation rarely falls short. After a round the upstream has counted, the
next prompt is that round's prompt and answer, plus what was added since (its tool
outputs), guessed the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.chat_json import encode_messages
from gateway.policy.prices import read_usage
from gateway.values import AssistantMessage, HiddenItem, Message, ToolOutput
from tool_registry import dumps

BYTES_PER_TOKEN = 3
ITEM_TOKENS = 8  # what a message's framing costs, beyond its text


_PER_MESSAGE = 4


def estimate_tokens(messages: Sequence[Message]) -> int:
    """The tokens of messages as a model server is sent them: a token per four
    characters of their JSON, plus a few per message (docs/responses.md says why it
    errs high)."""
    return sum(len(dumps(message)) // 4 + _PER_MESSAGE for message in encode_messages(messages))


def hidden_bytes(items: Sequence[HiddenItem]) -> int:
    size = 0
    for item in items:
        if isinstance(item, ToolOutput):
            size += len(item.content.encode()) + len(item.call_id)
        elif isinstance(item, AssistantMessage):
            size += len((item.content or "").encode())
            for call in item.calls:
                size += len(call.arguments.encode()) + len(call.name or "") + len(call.id)
    return size


def guess(size: int, items: int) -> int:
    return -(-size // BYTES_PER_TOKEN) + items * ITEM_TOKENS


class PromptSize:
    """The next round's prompt for one loop."""

    __slots__ = ("_base", "_known")

    def __init__(self, base_bytes: int) -> None:
        self._base = base_bytes
        self._known: tuple[int, int] | None = None  # counted tokens, hidden items then

    def next(self, hidden: Sequence[HiddenItem]) -> int:
        if self._known is None:
            return guess(self._base + hidden_bytes(hidden), len(hidden) + 1)
        tokens, counted = self._known
        added = hidden[counted:]
        return tokens + guess(hidden_bytes(added), len(added))

    def counted(self, usage: object, hidden: Sequence[HiddenItem]) -> None:
        """A round answered with ``usage`` after ``hidden``: its turn joins the history
        next, and both were counted."""
        counts = read_usage(usage)
        if counts is not None and counts.input:
            self._known = (counts.total, len(hidden) + 1)
