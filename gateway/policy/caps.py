"""The loop's bookkeeping and its caps.

``decide`` and ``check_caps`` are pure. ``LoopState`` is what one request has used so
far, and it changes only through its own methods, each named for the moment of the
loop it records: a round begins, a round's answer is counted, a decision is taken,
tools start, time runs out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from gateway.errors import ToolLimitExceeded
from gateway.policy.limits import LoopLimits
from gateway.policy.partition import partition_calls
from gateway.values import CapKind, ToolCall, Usage, UsageCounts
from tool_registry import immutable

# Each cap as the configuration (and ``LoopLimits``) names it; a client reads these
# names in ``x-toolgate-stopped``.
CAP_SETTINGS: dict[CapKind, str] = {
    "iterations": "max_iterations",
    "tool_calls": "max_tool_calls",
    "time": "request_timeout_s",
    "tokens": "max_tokens_per_request",
    "cost": "max_cost_usd_per_request",
    "quota": "budget",
}
BUDGET_CAPS: frozenset[CapKind] = frozenset({"tokens", "cost", "quota"})

_CAP_MESSAGES: dict[CapKind, str] = {
    "iterations": "The model still asked for tools after max_iterations ({n}) rounds.",
    "tool_calls": "The model asked for more than max_tool_calls ({n}) tool calls.",
    "time": "The tools did not finish within request_timeout_s ({n}s).",
}


@immutable
class CapDecision:
    """At a cap: which one, and how many of the pending calls may still run."""

    kind: CapKind
    runnable: int


@immutable
class Step:
    """What to do with an assistant turn.

    ``answer``: it is the final answer (any tool calls it still has are dropped);
    ``hand_back``: return it to the client with only ``calls``, the client's — after
    answering the ``hidden`` ones (server calls, unknown tools) if there are any;
    ``run_tools``: run its calls, at most ``runnable`` of them, and ask again.
    ``cap``: the cap this step reached, if any.
    """

    kind: Literal["answer", "hand_back", "run_tools"]
    calls: tuple[ToolCall, ...] = ()
    runnable: int = 0
    hidden: tuple[ToolCall, ...] = ()
    cap: CapKind | None = None


@dataclass(slots=True)
class LoopState:
    """What one request has used so far (shared by the loops of its choices)."""

    iterations: int = 0  # upstream calls made (or under way)
    tool_calls: int = 0  # tool executions made
    reused_calls: int = 0  # calls answered with the result of the same call made earlier
    reserved: int = 0  # executions allowed by a decision and not yet started
    # A write ran whose result is not kept for a retry (no write scope, or the store
    # was down): a failure after it tells the SDK not to retry (docs/design.md §16).
    unkept_writes: bool = False
    kept_calls: int = 0  # write calls answered with what an earlier attempt kept
    usage: Usage = field(default_factory=Usage)
    forced_final: bool = False  # the next round is the last, with no tools offered
    stopped: CapKind | None = None  # the cap that made a round the last, once one has
    caps: list[str] = field(default_factory=list)  # caps reached, for metrics and logs

    def begin_round(self, limits: LoopLimits) -> tuple[int, bool]:
        """A round starts: its number, and whether it is the last (no tools then).
        Counted at the start: the choices of a request run at once, and none may
        start a round the request's caps do not allow."""
        final = last_round_due(self, limits)
        if final and self.stopped is None:
            self.stopped = "iterations"
        self.iterations += 1
        return self.iterations, final

    def count_round(self, usage: UsageCounts | None) -> None:
        """A round's answer arrived: its usage."""
        self.usage.add(usage)

    def take(self, step: Step, limits: LoopLimits) -> None:
        """A decision is taken: a cap it reached is recorded (and is a 422 with
        ``on_limit: error``); the executions it allows are held until they start, so
        another choice deciding meanwhile sees the budget this one has taken."""
        if step.cap is not None:
            self.caps.append(step.cap)
            if limits.on_limit == "error":
                raise cap_error(step.cap, limits)
            if step.kind == "run_tools":  # a hand-back ends this request anyway
                self.forced_final = True
                self.stopped = step.cap
        self.reserved += step.runnable

    def start_tools(self, executions: int, held: int) -> None:
        """Tools start: ``executions`` of them, out of ``held`` reserved."""
        self.reserved = max(self.reserved - held, 0)
        self.tool_calls += executions

    def not_run(self, calls: int) -> None:
        """Of the tools started, ``calls`` were refused before anything was sent (an
        approval refused or timed out, a user's connection missing): not executions."""
        self.tool_calls -= calls

    def budget_stops(self, kind: CapKind, last_round: bool) -> None:
        """The budget ends the run: this round is its last (``last_round``), or no
        round is made and the answer so far is the answer."""
        if self.stopped is None:
            self.caps.append(kind)
            self.stopped = kind
        self.forced_final = self.forced_final or last_round

    def time_ran_out(self, limits: LoopLimits) -> None:
        """The tools did not finish in time: a 422 with ``on_limit: error``, else the
        next round is the last."""
        self.caps.append("time")
        if limits.on_limit == "error":
            raise cap_error("time", limits)
        self.forced_final = True
        self.stopped = "time"


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
    n: float = getattr(limits, CAP_SETTINGS[kind])
    return ToolLimitExceeded(_CAP_MESSAGES[kind].format(n=f"{n:g}"))


def decide(
    state: LoopState,
    limits: LoopLimits,
    calls: Sequence[ToolCall],
    server: frozenset[str],
    client: frozenset[str],
    final: bool,
    time_left_s: float,
) -> Step:
    """The next step after a round (pure); ``LoopState.take`` records it."""
    if not calls or final:
        return Step("answer")
    part = partition_calls(calls, server, client)
    hidden: tuple[ToolCall, ...] = ()
    if part.client:
        mine = {id(call) for call in part.client}
        hidden = tuple(call for call in calls if id(call) not in mine)
        if not hidden:
            return Step("hand_back", part.client)
    runnable = len(part.server)
    cap = check_caps(state, limits, runnable, time_left_s)
    if cap is not None and cap.kind == "iterations" and part.client:
        cap = None  # handing back needs no further round
    kind = cap.kind if cap is not None else None
    if cap is not None:
        runnable = cap.runnable
    if part.client:
        return Step("hand_back", part.client, runnable, hidden, kind)
    return Step("run_tools", runnable=runnable, cap=kind)
