"""The loop's bookkeeping and its caps (pure decisions, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .policy import LoopLimits

CapKind = Literal["iterations", "tool_calls", "time"]


@dataclass(slots=True)
class LoopState:
    """What one request has used so far."""

    iterations: int = 0  # upstream calls made
    tool_calls: int = 0  # tool executions made
    side_effects: bool = False  # a tool other than GET/HEAD has been called
    usage: dict[str, Any] = field(default_factory=dict)
    forced_final: bool = False  # the next round is the last, with tool_choice "none"


@dataclass(frozen=True, slots=True)
class CapDecision:
    """At a cap: which one, and how many of the pending calls may still run."""

    kind: CapKind
    runnable: int


def last_round_due(state: LoopState, limits: LoopLimits) -> bool:
    """With ``final_answer``, the round that uses the last iteration may not ask for tools."""
    if state.forced_final:
        return True
    return limits.on_limit == "final_answer" and state.iterations + 1 >= limits.max_iterations


def check_caps(
    state: LoopState, limits: LoopLimits, pending: int, time_left_s: float
) -> CapDecision | None:
    """Whether running ``pending`` tool calls now, and asking again, crosses a cap.

    Called after an assistant message asked for tools and before any of them runs.
    """
    if time_left_s <= 0:
        return CapDecision("time", 0)
    if state.iterations >= limits.max_iterations:
        return CapDecision("iterations", 0)
    budget = limits.max_tool_calls - state.tool_calls
    if pending > budget:
        return CapDecision("tool_calls", max(budget, 0))
    return None


def add_usage(total: dict[str, Any], usage: Any) -> dict[str, Any]:
    """Add one round's usage into ``total``: numbers summed, nested details too."""
    if not isinstance(usage, dict):
        return total
    for key, value in usage.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            total[key] = total.get(key, 0) + value
        elif isinstance(value, dict):
            inner = total.get(key)
            total[key] = add_usage(inner if isinstance(inner, dict) else {}, value)
    return total
