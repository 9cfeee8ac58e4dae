"""How a request's run ended, said once (docs/design.md §10).

The engine ends every run — answered, handed back, capped, failed or cancelled — with
one frozen ``RunReport``. Everything after the run reads that report and nothing else
of the engine: the answer's headers, metering, the budget's settlement, keeping a
response, the log line, metrics, the stored trace, the span and the recording.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Literal, get_args

from gateway.engine.loop import HandBack, LoopEnd, Run
from gateway.engine.runner import CallRecord
from gateway.errors import GatewayError
from gateway.policy.caps import CAP_SETTINGS
from gateway.policy.guardrails import GuardVerdict
from gateway.policy.ledger import RoundLine
from gateway.policy.point import PolicyPoint
from gateway.values import AnsweredRound, CapKind, ConnectLink, HiddenItem, ToolOutput, UsageCounts
from tool_registry import immutable

# answered: a final answer; handed_back: the client's calls (or approvals) returned to
# it; capped: answered, but a cap or budget forced the last round; failed: an error
# ended it; cancelled: the client left (or the server stopped) before it ended.
Ending = Literal["answered", "handed_back", "capped", "failed", "cancelled"]

# A run's outcome as an operator names it (the console's Runs page, ``/v1/toolgate/runs``),
# the first that holds: an error ended it; its client left; a guardrail blocked a text;
# a cap or budget forced its last round; the policy refused a call (a rule, an
# operator's denial, an approval that never came); a tool failed; the client's calls
# were handed back; it was passed through untouched; or it was simply answered.
RunOutcome = Literal[
    "failed",
    "cancelled",
    "blocked",
    "capped",
    "denied",
    "tool_failed",
    "handed_back",
    "passed_through",
    "answered",
]
RUN_OUTCOMES: tuple[RunOutcome, ...] = get_args(RunOutcome)
_FAILED_CALLS = frozenset(
    ("http_error", "tool_error", "unreadable", "timeout", "invalid_args", "unknown")
)

STOPPED_HEADER = "x-toolgate-stopped"  # the cap that ended a run
CONNECT_HEADER = "x-toolgate-connect"  # links where the user makes a tool's connection


@immutable
class ChoiceReport:
    """One choice's loop as it ended: how, the rounds the client did not see, and the
    outputs of the server calls of a turn handed back."""

    outcome: LoopEnd | None  # None: it did not end (failed or cancelled)
    hidden: tuple[HiddenItem, ...]
    handed: tuple[ToolOutput, ...]


@immutable
class RunReport:
    """A request's run, ended: every choice, what it used, what it spent."""

    ending: Ending
    choices: tuple[ChoiceReport, ...]
    usage: UsageCounts  # summed over every round (and work before the loop)
    iterations: int
    tool_calls: int
    reused_calls: int
    kept_calls: int
    caps: tuple[str, ...]  # the caps reached (``CapKind``s)
    stopped: CapKind | None  # the cap that forced the last round, if one did
    rounds: tuple[RoundLine, ...]  # each round's line in the trace
    answers: tuple[AnsweredRound, ...]  # each round's answer, when recorded
    calls: tuple[CallRecord, ...]  # every choice's tool calls
    error: GatewayError | None  # what ended a failed run
    cost_nanos: int | None  # what the run spent, when a budget counted it
    budget_headers: Mapping[str, str]  # the budget's answer headers, when it has one
    taint: str | None  # where the run first read untrusted words, if it has
    policy: PolicyPoint  # the request's: its registry, tools and rules
    upstream_model: str  # the model the upstream was asked for
    connects: tuple[ConnectLink, ...] = ()  # connections a tool needed that the user lacks
    guarded: tuple[GuardVerdict, ...] = ()  # every guardrail's verdict, in order

    def guardrail_lines(self, acted: bool = False) -> list[dict[str, object]]:
        """The guardrails' verdicts as the trace and the span show them (``acted``:
        only those that did something: not ``pass``)."""
        return [v.line() for v in self.guarded if not acted or v.action != "pass"]

    @property
    def outcome(self) -> RunOutcome:
        """How the run went, as an operator names it (``RunOutcome``)."""
        if self.ending in ("failed", "cancelled"):
            return self.ending
        if any(v.action == "block" for v in self.guarded):
            return "blocked"
        if self.ending == "capped":
            return "capped"
        if any(c.outcome == "denied" for c in self.calls):
            return "denied"
        if any(c.outcome in _FAILED_CALLS for c in self.calls):
            return "tool_failed"
        return "handed_back" if self.ending == "handed_back" else "answered"

    @property
    def stopped_by(self) -> str | None:
        """The cap that forced the last round, as the configuration names it."""
        return CAP_SETTINGS[self.stopped] if self.stopped is not None else None

    @property
    def round_cut_off(self) -> int | None:
        """The round under way when the run was cancelled, if one was."""
        if self.ending == "cancelled" and self.iterations > len(self.rounds):
            return self.iterations
        return None

    def headers(self) -> dict[str, str]:
        """What an answer says of the request's rounds: how many, how many tool calls
        ran and how many were answered with an earlier call's result, the cap that
        forced the last round (if one did), and the budget's account."""
        headers = {
            "x-toolgate-iterations": str(self.iterations),
            "x-toolgate-tool-calls": str(self.tool_calls),
            "x-toolgate-tool-calls-reused": str(self.reused_calls),
        }
        if self.stopped is not None:
            headers[STOPPED_HEADER] = CAP_SETTINGS[self.stopped]
        if self.connects:  # where the user makes the connections a tool needed
            headers[CONNECT_HEADER] = ", ".join(dict.fromkeys(c.url for c in self.connects))
        return headers | dict(self.budget_headers)

    @property
    def outcomes(self) -> list[LoopEnd]:
        """How every choice ended (an ended run's: each has an outcome)."""
        found = [choice.outcome for choice in self.choices]
        assert all(o is not None for o in found), "a run that ended has every outcome"
        return [o for o in found if o is not None]


def ending_of(runs: Sequence[Run], raised: BaseException | None) -> Ending:
    """How runs ended, from what (if anything) ended them early."""
    if raised is not None:
        cancelled = isinstance(raised, asyncio.CancelledError | GeneratorExit)
        return "cancelled" if cancelled else "failed"
    if any(isinstance(run.outcome, HandBack) for run in runs):
        return "handed_back"
    return "capped" if runs[0].state.stopped is not None else "answered"


def report_of(runs: Sequence[Run], raised: BaseException | None = None) -> RunReport:
    """The report of a request's runs (one per choice; they share its state), ended
    as ``raised`` says: by nothing, by an error, or by a cancellation."""
    first = runs[0]
    ledger, policy = first.ledger, first.policy
    state, budget = ledger.state, ledger.budget
    error = raised if isinstance(raised, GatewayError) else first.error
    return RunReport(
        ending=ending_of(runs, raised),
        choices=tuple(
            ChoiceReport(run.outcome, tuple(run.hidden), tuple(run.handed_outputs)) for run in runs
        ),
        usage=dict(state.usage.totals),
        iterations=state.iterations,
        tool_calls=state.tool_calls,
        reused_calls=state.reused_calls,
        kept_calls=state.kept_calls,
        caps=tuple(state.caps),
        stopped=state.stopped,
        rounds=tuple(ledger.rounds),
        answers=tuple(ledger.answers),
        calls=tuple(record for run in runs for record in run.runner.records),
        error=error,
        cost_nanos=budget.spent_nanos if budget is not None else None,
        budget_headers=budget.headers() if budget is not None else {},
        taint=ledger.taint,
        policy=policy,
        upstream_model=first.job.model.model,
        connects=tuple(ledger.connects),
        guarded=tuple(ledger.guarded),
    )
