"""What one request's run accumulates (docs/design.md §10, §13), in one place the engine
owns: its counts and caps (``LoopState``), what it may still spend (its budget), where
it first read untrusted words (its taint), the answers to the approvals it resumes
with, and each round's lines for the trace and the recording. The request's policy
(``PolicyPoint``) is set once; its verdicts read and record what they need here. The
loops of a request's choices share one ledger."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.policy.caps import LoopState
from gateway.policy.guardrails import GuardVerdict
from gateway.policy.run_budget import RoundSpend, RunBudget
from gateway.policy.verdicts import Allow, Refuse
from gateway.values import AnsweredRound, ConnectLink, UsageCounts
from tool_registry import immutable

Decided = dict[str, Allow | Refuse]  # resumed held calls' verdicts, by call id


@immutable
class Search:
    """A search of the tool catalog a round's turn made: its words, what it found."""

    query: str
    found: tuple[str, ...]
    # The parts of the query and what each found, when it has several.
    parts: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def line(self) -> dict[str, object]:
        line: dict[str, object] = {"query": self.query, "found": list(self.found)}
        if self.parts:
            line["parts"] = [{"part": part, "tools": list(names)} for part, names in self.parts]
        return line


@immutable
class RoundLine:
    """A round's line in the trace: which round of which choice, from which upstream,
    how long it took, its usage, whether it was the forced last, the tools it called,
    and what it spent of a budget."""

    iteration: int
    upstream: str
    duration_ms: float
    usage: UsageCounts | None
    forced_final: bool
    tool_calls: tuple[str | None, ...]
    choice: int = 0
    spent: RoundSpend | None = None
    offered: tuple[str, ...] | None = None  # the server tools a search chose for it
    searches: tuple[Search, ...] = ()  # the searches its turn made
    started: float = 0.0  # when the model was asked (``time.perf_counter``)
    # The first round's: the tools preselected for each part of the request.
    preselected: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def line(self, origin: float | None = None) -> dict[str, object]:
        """As the trace shows it; ``origin``: the request's start (``perf_counter``),
        from which the round's ``at_ms`` is counted."""
        line: dict[str, object] = {
            "iteration": self.iteration,
            "upstream": self.upstream,
            "duration_ms": self.duration_ms,
            "usage": self.usage,
            "forced_final": self.forced_final,
            "tool_calls": list(self.tool_calls),
        }
        if origin is not None:
            line["at_ms"] = round(max(self.started - origin, 0.0) * 1000, 3)
        if self.choice:
            line["choice"] = self.choice
        if self.spent is not None:
            line["budget"] = self.spent.line()
        if self.offered is not None:
            line["tools_offered"] = list(self.offered)
        if self.searches:
            line["searches"] = [search.line() for search in self.searches]
        if self.preselected:
            line["tools_preselected"] = [
                {"part": part, "tools": list(names)} for part, names in self.preselected
            ]
        return line


@dataclass(slots=True)
class Ledger:
    state: LoopState = field(default_factory=LoopState)
    budget: RunBudget | None = None  # what the run may spend, when anything counts
    taint: str | None = None  # where the run first read untrusted words, if it has
    decided: Decided = field(default_factory=dict)  # used up as each call comes to run
    rounds: list[RoundLine] = field(default_factory=list)  # each round's trace line
    answers: list[AnsweredRound] = field(default_factory=list)  # each round's, if recorded
    connects: list[ConnectLink] = field(default_factory=list)  # connections the user must make
    guarded: list[GuardVerdict] = field(default_factory=list)  # every guardrail's verdict

    def tainted(self, source: str | None) -> None:
        """The run has read untrusted words from ``source`` (the first one is named)."""
        if self.taint is None:
            self.taint = source
