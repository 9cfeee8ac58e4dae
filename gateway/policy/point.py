"""The policy point (DESIGN.md §13): every verdict on a request's tool calls is made
here, and nowhere else.

A surface makes one ``PolicyPoint`` per request, from the tenant's policy narrowed by
the request; the engine asks it, after every round, what comes next (``round``: run
the tools, hand calls back, answer — and which cap stopped the run, if one did), and
the tool runner asks it, before any call runs, whether that call may (``call``: run, or
refuse with the text the model reads). Its first rules are the allowlist, the
narrowing and the caps (``limits``, ``caps``); approvals, taint and budgets are added
here. Its ``state`` is what the request has used so far, shared by the loops of its
choices.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.config import LimitsConfig
from gateway.policy.caps import LoopState, Step, decide
from gateway.policy.limits import LoopLimits, Narrowing, effective_limits, effective_tools
from gateway.values import ToolCall
from tool_registry import Outcome, Tool, ToolRegistry, ToolResult, error_result

BUDGET_SPENT = error_result(
    "The tool budget of this request is spent; this call was not made. "
    "Answer with the information you have.",
    "denied",
)


@dataclass(frozen=True, slots=True)
class Run:
    """The call may run: this is its tool."""

    tool: Tool


@dataclass(frozen=True, slots=True)
class Refuse:
    """The call does not run: the model reads ``result`` in its place."""

    result: ToolResult


Verdict = Run | Refuse


class PolicyPoint:
    """What one request may do with tools, asked before anything runs."""

    __slots__ = (
        "_in_play",
        "_unavailable",
        "client_tools",
        "limits",
        "registry",
        "server_tools",
        "state",
    )

    def __init__(
        self,
        limits: LoopLimits,
        server_tools: Sequence[str],
        client_tools: frozenset[str],
        registry: ToolRegistry,
        state: LoopState | None = None,
    ) -> None:
        self.limits = limits
        self.server_tools = tuple(server_tools)
        self._in_play = frozenset(self.server_tools)
        self.client_tools = client_tools
        self.registry = registry  # of the runtime snapshot the request read
        self.state = state if state is not None else LoopState()
        self._unavailable: ToolResult | None = None

    @classmethod
    def of_request(
        cls,
        allowed: tuple[str, ...],
        limits: LimitsConfig,
        narrowing: Narrowing,
        client_tools: frozenset[str],
        registry: ToolRegistry,
    ) -> tuple[PolicyPoint, tuple[str, ...]]:
        """The request's policy — the tenant's allowlist and caps, narrowed (never
        widened) by the request — and the server tools a client tool of the same name
        shadows. Naming a tool the tenant may not use is refused (403)."""
        tools, shadowed = effective_tools(allowed, narrowing, client_tools)
        return cls(effective_limits(limits, narrowing), tools, client_tools, registry), shadowed

    def round(self, calls: Sequence[ToolCall], final: bool, time_left_s: float) -> Step:
        """What comes after a round whose turn made ``calls``: recorded in ``state``
        (a cap with ``on_limit: error`` is a 422 from here)."""
        step = decide(
            self.state,
            self.limits,
            calls,
            self._in_play,
            self.client_tools,
            final,
            time_left_s,
        )
        self.state.take(step, self.limits)
        return step

    def call(self, call: ToolCall) -> Verdict:
        """Whether one server-side call may run: only a tool in play does. Unknown
        tools and tools the request may not use read the same answer, which names
        what is available."""
        name = call.name
        tool = self.registry.get(name) if name in self._in_play else None
        if name is None or tool is None:
            outcome: Outcome = "denied" if name in self.registry else "unknown"
            return Refuse(ToolResult(self._unavailable_text(), outcome))
        return Run(tool)

    def over_budget(self) -> Refuse:
        """A call past what the round's decision allowed to run."""
        return Refuse(BUDGET_SPENT)

    def _unavailable_text(self) -> str:
        if self._unavailable is None:
            names = ", ".join([*self.server_tools, *sorted(self.client_tools)]) or "none"
            message = f"This tool is not available. Available tools: {names}."
            self._unavailable = error_result(message, "unknown")
        return self._unavailable.content
