"""The policy point (docs/design.md §13): every verdict on a request's tool calls is made
here, and nowhere else.

One factory (``PolicyPoint.of_request``) makes one ``PolicyPoint`` per request, from
the tenant's policy narrowed by the request, with who approves its held calls; every
surface and ``/mcp`` use it, and nothing changes it after. What a run accumulates —
its counts and caps, its spend, its taint, the answers to its approvals — is in the
run's ``Ledger``, which the engine owns and hands to each verdict that reads or
records it. The engine asks, after every round, what comes next (``round``: run the
tools, hand calls back, answer — and which cap stopped the run, if one did), and the
tool runner asks, before any call runs, whether that call may: ``call`` (the
allowlist and narrowing: the tool, or a refusal) then ``clearance`` (effects, taint
and approvals: run, refuse, or hold for a person's answer).

Holding a call: the client approves it when it can (``hand_to_client``: the run ends
with an approval request, and the client's next request ``resume``s it), else an
operator does while the run waits (``wait_for``), else it is refused.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from gateway.config import GuardrailOn, LimitsConfig, ToolSearchConfig
from gateway.ops.metrics import UNKNOWN, Metrics
from gateway.policy.approval_desk import MAX_REASON, Answer, ApprovalDesk, binding_problem
from gateway.policy.caps import Step, decide
from gateway.policy.guardrails import Guard, Screened, refusal_text
from gateway.policy.judges import Subject
from gateway.policy.ledger import Decided, Ledger
from gateway.policy.limits import LoopLimits, Narrowing, effective_limits, effective_tools
from gateway.policy.prices import nanos_of
from gateway.policy.rules import TenantPolicy
from gateway.policy.run_budget import RoundGrant, Stop
from gateway.policy.tool_search import Catalog, Catalogs
from gateway.policy.verdicts import Allow, Hold, Refuse, Verdict, Why, refusal
from gateway.store.approval_records import ApprovalRecord, Decision
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


class PolicyPoint:
    """What one request may do with tools, asked before anything runs. Set once, when
    the request is admitted; what its run accumulates is in the run's ``Ledger``."""

    __slots__ = (
        "_in_play",
        "_metrics",
        "_unavailable",
        "client_tools",
        "desk",
        "guard",
        "input_taint",
        "limits",
        "registry",
        "rules",
        "search",
        "server_tools",
        "tenant",
    )

    def __init__(
        self,
        limits: LoopLimits,
        server_tools: Sequence[str],
        client_tools: frozenset[str],
        registry: ToolRegistry,
        *,
        rules: TenantPolicy | None = None,
        desk: ApprovalDesk | None = None,
        tenant: str = "",
        metrics: Metrics | None = None,
        untrusted_input: bool = False,
        search: Catalog | None = None,
        members: frozenset[str] | None = None,
        guard: Guard | None = None,
    ) -> None:
        self.limits = limits
        self.server_tools = tuple(server_tools)
        # With tool search on, its function is the gateway's own tool in play.
        self.search = search
        # ``members``: the server tools as a set, when the caller keeps one.
        if search is not None:
            self._in_play = search.members
        else:
            self._in_play = members if members is not None else frozenset(self.server_tools)
        self.client_tools = client_tools
        self.registry = registry  # of the runtime snapshot the request read
        self.rules = rules if rules is not None else TenantPolicy()
        self.desk = desk
        self.tenant = tenant
        self.guard = guard  # screens what enters a run and what leaves it (docs/guardrails.md)
        self._metrics = metrics
        untrusted = untrusted_input or self.rules.input == "untrusted"
        # The run starts tainted when its input is marked untrusted.
        self.input_taint: str | None = INPUT_TAINT if untrusted else None
        self._unavailable: ToolResult | None = None  # the refusal of an unavailable tool

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
        search: tuple[Catalogs, ToolSearchConfig] | None = None,
        members: frozenset[str] | None = None,
        guard: Guard | None = None,
    ) -> tuple[PolicyPoint, tuple[str, ...]]:
        """The request's policy — the tenant's allowlist and caps, narrowed (never
        widened) by the request, its tool rules and approvals, whether its tools are
        searched (``search``: the snapshot's catalogs and the tenant's settings) — and
        the server tools a client tool of the same name shadows. Naming a tool the
        tenant may not use is refused (403). ``members``: ``allowed`` as a set, if the
        caller keeps one."""
        tools, shadowed = effective_tools(allowed, narrowing, client_tools, members)
        catalog = search[0].of(tools, search[1], client_tools) if search is not None else None
        point = cls(
            effective_limits(limits, narrowing),
            tools,
            client_tools,
            registry,
            rules=rules,
            desk=desk,
            tenant=tenant,
            metrics=metrics,
            untrusted_input=narrowing.untrusted_input,
            search=catalog,
            members=members if tools is allowed else None,
            guard=guard,
        )
        return point, shadowed

    async def admit(
        self, ledger: Ledger, tool: Tool, result: ToolResult, call_id: str | None = None
    ) -> ToolResult:
        """A call's result enters the run here, whichever way it came (run now, from the
        cache, kept by an earlier attempt for a retry, from a recording being replayed):
        what the model reads of it. The tool's guardrails screen it first (docs/guardrails.md:
        it may be withheld, redacted, flagged, or taint the run); then an ``untrusted``
        tool's taints the run, whatever it answered (an error body carries the far side's
        words too). Nothing is screened or tainted where the gateway answered in the
        tool's place (``denied``: nothing was sent) or is the tool (a search reads the
        catalog's own definitions, which the model reads anyway)."""
        if result.outcome == "denied" or self._own(tool):
            return result
        policy = self.rules.of(tool)
        if policy.guardrails and self.guard is not None:
            subject = Subject("tool_result", tool.name, self.tenant, call_id)
            read = result.whole if result.whole is not None else result.content
            screened = await self.guard.screen(policy.guardrails, read, subject)
            ledger.guarded += screened.verdicts
            if screened.taint is not None:
                ledger.tainted(screened.taint)
            if screened.blocked is not None:  # the model never reads it: nothing taints
                text = refusal_text(screened.blocked)
                return ToolResult(
                    text, "denied", result.status, f"guardrail:{screened.blocked.guardrail}"
                )
            if result.whole is not None:  # screened first, cut after
                result = result.recut(screened.text or "")
            elif screened.text is not None and screened.text != result.content:
                result = ToolResult(screened.text, result.outcome, result.status, result.code)
        if policy.output == "untrusted":
            ledger.tainted(f"tool {tool.name!r}")
        return result

    async def screen(
        self, text: str, on: GuardrailOn, subject: str, call_id: str | None = None
    ) -> Screened:
        """``text`` after the request's guardrails ``on`` the client's input or the
        model's final answer (``subject`` names it), or a client tool's answer (by the
        ``tool_result`` guardrails about the client's tool ``subject``). The caller keeps
        the verdicts."""
        rules = self.rules
        guardrails = rules.guardrails(on) if on != "tool_result" else rules.of_client(subject)
        if not guardrails or self.guard is None:
            return Screened(text)
        return await self.guard.screen(guardrails, text, Subject(on, subject, self.tenant, call_id))

    @property
    def screens_answers(self) -> bool:
        """Whether guardrails screen the model's answers: then no request is passed
        through unscreened."""
        return self.guard is not None and self.rules.screens_answers

    @property
    def screens_client(self) -> bool:
        """Whether guardrails screen what the client sends (its input, its tools'
        answers) as it enters a run."""
        return self.guard is not None and self.rules.screens_client

    def round(
        self, ledger: Ledger, calls: Sequence[ToolCall], final: bool, time_left_s: float
    ) -> Step:
        """What comes after a round whose turn made ``calls``: recorded in the
        ledger (a cap with ``on_limit: error`` is a 422 from here)."""
        step = decide(
            state=ledger.state,
            limits=self.limits,
            calls=calls,
            server=self._in_play,
            client=self.client_tools,
            final=final,
            time_left_s=time_left_s,
        )
        ledger.state.take(step, self.limits)
        return step

    async def before_round(
        self, ledger: Ledger, prompt: int, client_max: int | None, first: bool
    ) -> RoundGrant | Stop | None:
        """Whether a round whose prompt is about ``prompt`` tokens may be made, and
        within what: its grant; ``Stop`` when the budget ends the run with the answer
        so far; None when nothing is counted. A 422 or 429 comes from here when the
        answer so far will not do (the first round, or ``on_limit: error``). Recorded
        in the ledger: the budget cap that stopped the run, or made this round its last."""
        budget = ledger.budget
        if budget is None:
            return None
        grant = await budget.before_round(prompt, client_max, first)
        if isinstance(grant, Stop):
            ledger.state.budget_stops(grant.kind, last_round=False)
        elif grant.last is not None:
            ledger.state.budget_stops(grant.last, last_round=True)
        return grant

    async def afford(
        self, ledger: Ledger, to_run: Mapping[str, PreparedCall]
    ) -> dict[str, ToolResult]:
        """The priced calls of ``to_run`` the budget does not pay for, by key, with
        what the model reads in their place; the others are charged now."""
        budget = ledger.budget
        if budget is None:
            return {}
        priced = [
            (key, nanos_of(self.rules.of(p.tool).cost_usd))
            for key, p in to_run.items()
            if not self._own(p.tool)
        ]
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
        search = self.search
        if search is not None and name == search.tool.name:
            return Allow(search.tool)
        tool = self.registry.get(name) if name is not None and name in self._in_play else None
        if name is None or tool is None:
            outcome: Outcome = "denied" if name in self.registry else "unknown"
            self._count(name if outcome == "denied" else None, "refuse")
            return Refuse(ToolResult(self._unavailable_text(), outcome))
        return Allow(tool)

    def clearance(self, ledger: Ledger, call: ToolCall, tool: Tool) -> Verdict:
        """Whether a call the allowlist lets through, its arguments valid, runs now:
        what the tool does, what the run has read (``ledger.taint``), and who
        approves it say."""
        decided = ledger.decided.pop(call.id, None)
        if decided is not None:  # resumed: its approval was answered
            self._count(tool.name, (decided.why or {}).get("verdict", "refuse"))
            return decided
        if self._own(tool):  # reads the catalog, changes nothing: no rule is about it
            return Allow(tool)
        policy, taint = self.rules.of(tool), ledger.taint
        rule: str | None = None
        if policy.approval == "always":
            rule = "approval: always"
        elif taint is not None and policy.approval == "after_untrusted":
            rule = "approval: after_untrusted"
        elif taint is not None and policy.effects == "write":
            after = self.rules.after_untrusted
            if after == "refuse":
                self._count(tool.name, "refuse")
                return refusal(
                    f"This call to {tool.name} was refused: this run has read untrusted "
                    f"content (from {taint}), and {tool.name} changes things "
                    "(policy after_untrusted: refuse). Answer without it, or tell the "
                    "user what you would have done.",
                    {"verdict": "refuse", "rule": "after_untrusted: refuse", "taint": taint},
                )
            if after == "approve":
                rule = "after_untrusted: approve"
        if rule is None:
            self._count(tool.name, "run")
            return Allow(tool)
        why: Why = {"verdict": "hold", "rule": rule, "taint": taint}
        desk = self.desk
        if desk is None or desk.approver is None:
            self._count(tool.name, "refuse")
            return refusal(
                f"This call to {tool.name} needs a person's approval ({rule}), and no one "
                "can approve it in this request. Answer without it, or tell the user what "
                "you would have done.",
                why | {"verdict": "refuse", "approver": None},
            )
        self._count(tool.name, "hold")
        record = desk.record(call, policy, rule, taint)
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

    async def wait_for(self, hold: Hold, deadline: float | None) -> Allow | Refuse:
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
            return refusal(
                f"This call to {hold.tool.name} needed an operator's approval, which did "
                "not come in time; it was not made. Answer without it.",
                hold.why | {"verdict": "expired"},
            )
        if metrics is not None:
            metrics.approval_seconds.labels("operator").observe(time.time() - record.created)
        return self._answered(hold.tool, decision, record.id, hold.why)

    async def resume(self, answers: Mapping[str, Answer], pending: Sequence[ToolCall]) -> Decided:
        """A client's answers to the approvals its last response asked for: each held
        call of ``pending`` (the unanswered server calls the history ends with) is
        decided here — approved, denied, or refused because the answer does not bind
        to it — and runs (or not) when the loop starts (``Ledger.decided``)."""
        desk = self.desk
        decided: Decided = {}
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
                decided[call.id] = refusal(
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
                decided[call.id] = refusal(
                    f"This call to {tool.name} was not made: its approval does not hold "
                    f"({problem}).",
                    why | {"verdict": "refuse", "binding": problem},
                )
                continue
            if self._metrics is not None:
                self._metrics.approval_seconds.labels("client").observe(now - record.created)
            decision = Decision(answer.approve, answer.reason, "client")
            decided[call.id] = self._answered(tool, decision, record.id, why)
        return decided

    def _answered(self, tool: Tool, decision: Decision, approval: str, why: Why) -> Allow | Refuse:
        why = why | {"approval": approval, "decider": decision.decider}
        if decision.approve:
            return Allow(tool, why | {"verdict": "approved"})
        reason = (decision.reason or "").strip()[:MAX_REASON]
        said = f" The reason given: {reason}" if reason else ""
        return refusal(
            f"This call to {tool.name} was denied by the {decision.decider.split(':')[0]} "
            f"who approves it; it was not made.{said} Do not try it again; answer without it.",
            why | {"verdict": "denied", "reason": reason or None},
        )

    def _count(self, tool: str | None, verdict: str) -> None:
        if self._metrics is not None:
            name = tool if tool is not None else UNKNOWN
            self._metrics.policy_verdicts.labels(self.tenant, name, verdict).inc()

    def serves(self, name: str | None) -> bool:
        """Whether ``name`` is a server tool in play for this request."""
        return name is not None and name in self._in_play and name in self.registry

    def _own(self, tool: Tool) -> bool:
        """Whether ``tool`` is the gateway's own (its search function)."""
        return self.search is not None and tool is self.search.tool

    def tool(self, name: str | None) -> Tool | None:
        """The tool of ``name`` as this request knows it: the registry's, or the
        gateway's own."""
        if name is None:
            return None
        search = self.search
        if search is not None and name == search.tool.name:
            return search.tool
        return self.registry.get(name)

    def over_budget(self) -> Refuse:
        """A call past what the round's decision allowed to run."""
        return Refuse(BUDGET_SPENT)

    def _unavailable_text(self) -> str:
        if self._unavailable is None:
            if self.search is not None:  # too many to name: the search finds them
                names = ", ".join(sorted(self.client_tools))
                also = f" Besides them, the client's tools: {names}." if names else ""
                message = (
                    "This tool is not available. Find the tools you may use with "
                    f"{self.search.tool.name}.{also}"
                )
                self._unavailable = error_result(message, "unknown")
                return self._unavailable.content
            names = ", ".join([*self.server_tools, *sorted(self.client_tools)]) or "none"
            message = f"This tool is not available. Available tools: {names}."
            self._unavailable = error_result(message, "unknown")
        return self._unavailable.content
