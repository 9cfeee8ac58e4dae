"""The policy point (DESIGN.md §13): every verdict on a request's tool calls is made
here, and nowhere else.

A surface makes one ``PolicyPoint`` per request, from the tenant's policy narrowed by
the request; the engine asks it, after every round, what comes next (``round``: run
the tools, hand calls back, answer — and which cap stopped the run, if one did), and
the tool runner asks it, before any call runs, whether that call may: ``call`` (the
allowlist and narrowing: the tool, or a refusal) then ``clearance`` (effects, taint
and approvals: run, refuse, or hold for a person's answer). Its ``state`` is what the
request has used so far, shared by the loops of its choices; ``taint`` is where the
run first read untrusted words, if it has.

Holding a call: the client approves it when it can (``hand_to_client``: the run ends
with an approval request, and the client's next request ``resume``s it), else an
operator does while the run waits (``wait_for``), else it is refused.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.config import LimitsConfig
from gateway.ops.metrics import UNKNOWN, Metrics
from gateway.policy.approvals import MAX_REASON, Answer, ApprovalDesk, binding_problem
from gateway.policy.budget import RoundGrant, RunBudget, Stop
from gateway.policy.caps import LoopState, Step, decide
from gateway.policy.limits import LoopLimits, Narrowing, effective_limits, effective_tools
from gateway.policy.prices import nanos_of
from gateway.policy.rules import TenantPolicy
from gateway.store.approvals import ApprovalRecord, Decision
from gateway.values import ToolCall
from tool_registry import Outcome, PreparedCall, Tool, ToolRegistry, ToolResult, error_result

BUDGET_SPENT = error_result(
    "The tool budget of this request is spent; this call was not made. "
    "Answer with the information you have.",
    "denied",
)
COST_SPENT = error_result(
    "The cost budget of this request (or of its API key) is spent; this call was not "
    "made. Answer with the information you have.",
    "denied",
)


INPUT_TAINT = "the request's input"  # marked untrusted (x-toolgate-input, or the tenant)

Why = dict[str, Any]  # what the trace says of a verdict: the rule, the taint, the approval


@dataclass(frozen=True, slots=True)
class Run:
    """The call may run: this is its tool."""

    tool: Tool
    why: Why | None = None


@dataclass(frozen=True, slots=True)
class Refuse:
    """The call does not run: the model reads ``result`` in its place."""

    result: ToolResult
    why: Why | None = None


@dataclass(frozen=True, slots=True)
class Hold:
    """The call waits for a person's answer to ``record``."""

    tool: Tool
    record: ApprovalRecord
    why: Why


Verdict = Run | Refuse | Hold


def _refusal(text: str, why: Why) -> Refuse:
    return Refuse(error_result(text, "denied"), why)


class PolicyPoint:
    """What one request may do with tools, asked before anything runs."""

    __slots__ = (
        "_decided",
        "_in_play",
        "_metrics",
        "_unavailable",
        "budget",
        "client_tools",
        "desk",
        "limits",
        "registry",
        "rules",
        "server_tools",
        "state",
        "taint",
        "tenant",
    )

    def __init__(
        self,
        limits: LoopLimits,
        server_tools: Sequence[str],
        client_tools: frozenset[str],
        registry: ToolRegistry,
        state: LoopState | None = None,
        *,
        rules: TenantPolicy | None = None,
        desk: ApprovalDesk | None = None,
        tenant: str = "",
        metrics: Metrics | None = None,
    ) -> None:
        self.limits = limits
        self.server_tools = tuple(server_tools)
        self._in_play = frozenset(self.server_tools)
        self.client_tools = client_tools
        self.registry = registry  # of the runtime snapshot the request read
        self.state = state if state is not None else LoopState()
        self._unavailable: ToolResult | None = None
        self.rules = rules if rules is not None else TenantPolicy()
        self.desk = desk
        self.tenant = tenant
        self._metrics = metrics
        self.taint: str | None = INPUT_TAINT if self.rules.input == "untrusted" else None
        self._decided: dict[str, Run | Refuse] = {}  # resumed calls' answers, by call id
        self.budget: RunBudget | None = None  # what the run may spend, if anything counts

    @classmethod
    def of_request(
        cls,
        allowed: tuple[str, ...],
        limits: LimitsConfig,
        narrowing: Narrowing,
        client_tools: frozenset[str],
        registry: ToolRegistry,
        *,
        rules: TenantPolicy | None = None,
        desk: ApprovalDesk | None = None,
        tenant: str = "",
        metrics: Metrics | None = None,
    ) -> tuple[PolicyPoint, tuple[str, ...]]:
        """The request's policy — the tenant's allowlist and caps, narrowed (never
        widened) by the request, its tool rules and approvals — and the server tools a
        client tool of the same name shadows. Naming a tool the tenant may not use is
        refused (403)."""
        tools, shadowed = effective_tools(allowed, narrowing, client_tools)
        point = cls(
            effective_limits(limits, narrowing),
            tools,
            client_tools,
            registry,
            rules=rules,
            desk=desk,
            tenant=tenant,
            metrics=metrics,
        )
        if narrowing.untrusted_input:
            point.tainted(INPUT_TAINT)
        return point, shadowed

    def tainted(self, source: str) -> None:
        """The run has read untrusted words from ``source`` (the first one is named)."""
        if self.taint is None:
            self.taint = source

    def read(self, tool: Tool, result: ToolResult) -> None:
        """A call's result is in the run: an ``untrusted`` tool's taints it, whatever
        it answered (an error body carries the far side's words too), unless the
        gateway answered in its place (``denied``: nothing was sent)."""
        if result.outcome != "denied" and self.rules.of(tool).output == "untrusted":
            self.tainted(f"tool {tool.name!r}")

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

    async def before_round(
        self, prompt: int, client_max: int | None, first: bool
    ) -> RoundGrant | Stop | None:
        """Whether a round whose prompt is about ``prompt`` tokens may be made, and
        within what: its grant; ``Stop`` when the budget ends the run with the answer
        so far; None when nothing is counted. A 422 or 429 comes from here when the
        answer so far will not do (the first round, or ``on_limit: error``). Recorded
        in ``state``: the budget cap that stopped the run, or made this round its last."""
        budget = self.budget
        if budget is None:
            return None
        grant = await budget.before_round(prompt, client_max, first)
        if isinstance(grant, Stop):
            self.state.budget_stops(grant.kind, last_round=False)
        elif grant.last is not None:
            self.state.budget_stops(grant.last, last_round=True)
        return grant

    async def afford(self, to_run: Mapping[str, PreparedCall]) -> dict[str, ToolResult]:
        """The priced calls of ``to_run`` the budget does not pay for, by key, with
        what the model reads in their place; the others are charged now."""
        budget = self.budget
        if budget is None:
            return {}
        priced = [(key, nanos_of(self.rules.of(p.tool).cost_usd)) for key, p in to_run.items()]
        priced = [(key, cost) for key, cost in priced if cost > 0]
        if not priced:
            return {}
        allowed = await budget.afford_tools([cost for _, cost in priced])
        refused = {key: COST_SPENT for key, _ in priced[allowed:]}
        for key in refused:
            self._count(to_run[key].tool.name, "refuse")
        return refused

    def call(self, call: ToolCall) -> Verdict:
        """Whether one server-side call may run: only a tool in play does. Unknown
        tools and tools the request may not use read the same answer, which names
        what is available."""
        name = call.name
        tool = self.registry.get(name) if name in self._in_play else None
        if name is None or tool is None:
            outcome: Outcome = "denied" if name in self.registry else "unknown"
            self._count(name if outcome == "denied" else None, "refuse")
            return Refuse(ToolResult(self._unavailable_text(), outcome))
        return Run(tool)

    def clearance(self, call: ToolCall, tool: Tool) -> Verdict:
        """Whether a call the allowlist lets through, its arguments valid, runs now:
        what the tool does, what the run has read, and who approves it say."""
        decided = self._decided.pop(call.id, None)
        if decided is not None:  # resumed: its approval was answered
            self._count(tool.name, (decided.why or {}).get("verdict", "refuse"))
            return decided
        policy = self.rules.of(tool)
        rule: str | None = None
        if policy.approval == "always":
            rule = "approval: always"
        elif self.taint is not None and policy.approval == "after_untrusted":
            rule = "approval: after_untrusted"
        elif self.taint is not None and policy.effects == "write":
            after = self.rules.after_untrusted
            if after == "refuse":
                self._count(tool.name, "refuse")
                return _refusal(
                    f"This call to {tool.name} was refused: this run has read untrusted "
                    f"content (from {self.taint}), and {tool.name} changes things "
                    "(policy after_untrusted: refuse). Answer without it, or tell the "
                    "user what you would have done.",
                    {"verdict": "refuse", "rule": "after_untrusted: refuse", "taint": self.taint},
                )
            if after == "approve":
                rule = "after_untrusted: approve"
        if rule is None:
            self._count(tool.name, "run")
            return Run(tool)
        why: Why = {"verdict": "hold", "rule": rule, "taint": self.taint}
        desk = self.desk
        if desk is None or desk.approver is None:
            self._count(tool.name, "refuse")
            return _refusal(
                f"This call to {tool.name} needs a person's approval ({rule}), and no one "
                "can approve it in this request. Answer without it, or tell the user what "
                "you would have done.",
                why | {"verdict": "refuse", "approver": None},
            )
        self._count(tool.name, "hold")
        record = desk.record(call, policy, rule, self.taint)
        return Hold(tool, record, why | {"approval": record.id, "approver": desk.approver})

    async def hand_to_client(self, holds: Sequence[Hold]) -> tuple[ToolCall, ...]:
        """Keep the approvals of ``holds`` for the client's answer: the calls that ask
        for them (``kind="approval"``, each under its approval's id)."""
        assert self.desk is not None
        assert self.desk.store is not None
        asked = []
        for hold in holds:
            await self.desk.store.create(hold.record)
            record = hold.record
            asked.append(ToolCall(record.id, record.tool, record.arguments, kind="approval"))
        return tuple(asked)

    async def wait_for(self, hold: Hold, deadline: float | None) -> Run | Refuse:
        """An operator's answer to a held call, waited for (the run's streams keep
        alive meanwhile); none in time is a refusal."""
        assert self.desk is not None
        record = hold.record
        metrics = self._metrics
        if metrics is not None:
            metrics.approvals_pending.inc()
        try:
            decision = await self.desk.wait(record, deadline)
        finally:
            if metrics is not None:
                metrics.approvals_pending.dec()
        if decision is None:
            self._count(hold.tool.name, "expired")
            return _refusal(
                f"This call to {hold.tool.name} needed an operator's approval, which did "
                "not come in time; it was not made. Answer without it.",
                hold.why | {"verdict": "expired"},
            )
        if metrics is not None:
            metrics.approval_seconds.labels("operator").observe(time.time() - record.created)
        return self._answered(hold.tool, decision, record.id, hold.why)

    async def resume(self, answers: Mapping[str, Answer], pending: Sequence[ToolCall]) -> None:
        """A client's answers to the approvals its last response asked for: each held
        call of ``pending`` (the unanswered server calls the history ends with) is
        decided here — approved, denied, or refused because the answer does not bind
        to it — and runs (or not) when the loop starts."""
        desk = self.desk
        found: dict[str, tuple[ApprovalRecord, Answer]] = {}
        if desk is not None and desk.store is not None:
            for answer in answers.values():
                seen = await desk.store.peek(self.tenant, answer.approval_id)
                if seen is None or seen.owner != desk.owner or seen.by != "client":
                    # Unknown, used, expired, another user's or an operator's: not
                    # this client's to use up.
                    continue
                record = await desk.store.take(self.tenant, answer.approval_id)
                if record is not None:
                    found[record.call_id] = (record, answer)
        now = time.time()
        for call in pending:
            tool = self.registry.get(call.name) if call.name else None
            if tool is None:
                continue  # refused by the allowlist when it comes to run
            entry = found.get(call.id)
            if entry is None:
                self._decided[call.id] = _refusal(
                    f"This call to {tool.name} was held for approval, and no valid answer "
                    "came back (it expired, was used already, or was never given); it was "
                    "not made.",
                    {"verdict": "refuse", "rule": "approval missing"},
                )
                continue
            record, answer = entry
            why: Why = {"rule": record.why, "taint": record.taint, "approval": record.id}
            problem = binding_problem(
                record, call, desk.owner if desk else "", self.rules.of(tool), answer, now
            )
            if problem is not None:
                self._decided[call.id] = _refusal(
                    f"This call to {tool.name} was not made: its approval does not hold "
                    f"({problem}).",
                    why | {"verdict": "refuse", "binding": problem},
                )
                continue
            if self._metrics is not None:
                self._metrics.approval_seconds.labels("client").observe(now - record.created)
            decision = Decision(answer.approve, answer.reason, "client")
            self._decided[call.id] = self._answered(tool, decision, record.id, why)

    def _answered(self, tool: Tool, decision: Decision, approval: str, why: Why) -> Run | Refuse:
        why = why | {"approval": approval, "decider": decision.decider}
        if decision.approve:
            return Run(tool, why | {"verdict": "approved"})
        reason = (decision.reason or "").strip()[:MAX_REASON]
        said = f" The reason given: {reason}" if reason else ""
        return _refusal(
            f"This call to {tool.name} was denied by the {decision.decider.split(':')[0]} "
            f"who approves it; it was not made.{said} Do not try it again; answer without it.",
            why | {"verdict": "denied", "reason": reason or None},
        )

    def _count(self, tool: str | None, verdict: str) -> None:
        if self._metrics is not None:
            name = tool if tool is not None else UNKNOWN
            self._metrics.policy_verdicts.labels(self.tenant, name, verdict).inc()

    def over_budget(self) -> Refuse:
        """A call past what the round's decision allowed to run."""
        return Refuse(BUDGET_SPENT)

    def _unavailable_text(self) -> str:
        if self._unavailable is None:
            names = ", ".join([*self.server_tools, *sorted(self.client_tools)]) or "none"
            message = f"This tool is not available. Available tools: {names}."
            self._unavailable = error_result(message, "unknown")
        return self._unavailable.content
