"""The loop's bookkeeping and its caps (pure decisions, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import ToolLimitExceeded
from .partition import partition_calls
from .policy import LoopLimits

CapKind = Literal["iterations", "tool_calls", "time"]

_CAP_MESSAGES: dict[CapKind, str] = {
    "iterations": "The model still asked for tools after max_iterations ({n}) rounds.",
    "tool_calls": "The model asked for more than max_tool_calls ({n}) tool calls.",
    "time": "The tools did not finish within request_timeout_s ({n}s).",
}


@dataclass(slots=True)
class LoopState:
    """What one request has used so far."""

    iterations: int = 0  # upstream calls made (or under way)
    tool_calls: int = 0  # tool executions made
    reserved: int = 0  # executions allowed by a decision and not yet started
    side_effects: bool = False  # a tool other than GET/HEAD has been called
    usage: dict[str, Any] = field(default_factory=dict)
    forced_final: bool = False  # the next round is the last, with tool_choice "none"
    caps: list[str] = field(default_factory=list)  # caps reached, for metrics and logs
    rounds: list[dict[str, Any]] = field(default_factory=list)  # for the trace


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
    budget = limits.max_tool_calls - state.tool_calls - state.reserved
    if pending > budget:
        return CapDecision("tool_calls", max(budget, 0))
    return None


def cap_error(kind: CapKind, limits: LoopLimits) -> ToolLimitExceeded:
    n: float = {
        "iterations": limits.max_iterations,
        "tool_calls": limits.max_tool_calls,
        "time": limits.request_timeout_s,
    }[kind]
    return ToolLimitExceeded(_CAP_MESSAGES[kind].format(n=f"{n:g}"))


@dataclass(frozen=True, slots=True)
class Step:
    """What to do with an assistant message.

    ``answer``: it is the final answer (any tool calls it still has are dropped);
    ``hand_back``: return it to the client with only ``calls``, the client's — after
    answering the ``hidden`` ones (server calls, unknown tools) if there are any;
    ``run_tools``: run its calls, at most ``runnable`` of them, and ask again.
    """

    kind: Literal["answer", "hand_back", "run_tools"]
    calls: list[dict[str, Any]] = field(default_factory=list)
    runnable: int = 0
    hidden: list[dict[str, Any]] = field(default_factory=list)


def decide(
    state: LoopState,
    limits: LoopLimits,
    calls: list[dict[str, Any]],
    server: frozenset[str],
    client: frozenset[str],
    final: bool,
    time_left_s: float,
) -> Step:
    """The next step after a round (pure). At a cap with ``on_limit: error`` it raises
    ``ToolLimitExceeded``; with ``final_answer`` it marks the next round the last."""
    if not calls or final:
        return Step("answer")
    part = partition_calls(calls, server, client)
    hidden: list[dict[str, Any]] = []
    if part.client:
        mine = {id(call) for call in part.client}
        hidden = [call for call in calls if id(call) not in mine]
        if not hidden:
            return Step("hand_back", part.client)
    runnable = len(part.server)
    cap = check_caps(state, limits, runnable, time_left_s)
    if cap is not None and cap.kind == "iterations" and part.client:
        cap = None  # handing back needs no further round
    if cap is not None:
        state.caps.append(cap.kind)
        if limits.on_limit == "error":
            raise cap_error(cap.kind, limits)
        runnable = cap.runnable
        state.forced_final = not part.client  # a hand-back ends this request anyway
    if part.client:
        return Step("hand_back", part.client, runnable, hidden)
    return Step("run_tools", runnable=runnable)


def add_usage(total: dict[str, Any], usage: Any) -> dict[str, Any]:
    """Add one round's usage into ``total``: numbers summed, nested details too."""
    if not isinstance(usage, dict):
        return total
    for key, value in usage.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            before = total.get(key, 0)
            total[key] = (before if isinstance(before, int | float) else 0) + value
        elif isinstance(value, dict):
            inner = total.get(key)
            total[key] = add_usage(inner if isinstance(inner, dict) else {}, value)
    return total
