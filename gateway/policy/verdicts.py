"""The policy point's verdicts on one tool call (docs/design.md §13): it runs, it is
refused (the model reads why in its place), or it is held for a person's answer."""

from __future__ import annotations

from typing import Any

from gateway.store.approval_records import ApprovalRecord
from tool_registry import Tool, ToolResult, error_result, immutable

Why = dict[str, Any]  # what the trace says of a verdict: the rule, the taint, the approval


@immutable
class Allow:
    """The call may run: this is its tool."""

    tool: Tool
    why: Why | None = None


@immutable
class Refuse:
    """The call does not run: the model reads ``result`` in its place."""

    result: ToolResult
    why: Why | None = None


@immutable
class Hold:
    """The call waits for a person's answer to ``record``."""

    tool: Tool
    record: ApprovalRecord
    why: Why


Verdict = Allow | Refuse | Hold


def refusal(text: str, why: Why) -> Refuse:
    """A refusal the model reads as the call's result."""
    return Refuse(error_result(text, "denied"), why)
