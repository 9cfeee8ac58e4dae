"""Sorting a turn's tool calls by who runs them (pure)."""

from __future__ import annotations

from collections.abc import Container, Sequence

from gateway.values import ToolCall
from tool_registry import immutable


@immutable
class Partition:
    server: tuple[ToolCall, ...] = ()
    client: tuple[ToolCall, ...] = ()
    unavailable: tuple[ToolCall, ...] = ()  # unknown or not allowed


def partition_calls(
    calls: Sequence[ToolCall], server: Container[str], client: Container[str]
) -> Partition:
    """Split calls into server calls (tools in play), client calls (the request's own
    tools) and unavailable ones (anything else: unknown, or not allowed)."""
    mine: list[ToolCall] = []
    theirs: list[ToolCall] = []
    neither: list[ToolCall] = []
    for call in calls:
        name = call.name
        if name is not None and name in client:
            theirs.append(call)
        elif name is not None and call.kind == "function" and name in server:
            mine.append(call)
        else:
            neither.append(call)
    return Partition(tuple(mine), tuple(theirs), tuple(neither))
