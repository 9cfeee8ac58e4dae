"""What one request's run accumulates (DESIGN.md §10, §13), in one place the engine
owns: its counts and caps (``LoopState``), what it may still spend (its budget), where
it first read untrusted words (its taint), the answers to the approvals it resumes
with, and each round's lines for the trace and the recording. The request's policy
(``PolicyPoint``) is set once; its verdicts read and record what they need here. The
loops of a request's choices share one ledger."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.policy.caps import LoopState
from gateway.policy.run_budget import RunBudget
from gateway.policy.verdicts import Allow, Refuse
from gateway.values import AnsweredRound

Decided = dict[str, Allow | Refuse]  # resumed held calls' verdicts, by call id


@dataclass(slots=True)
class Ledger:
    state: LoopState = field(default_factory=LoopState)
    budget: RunBudget | None = None  # what the run may spend, when anything counts
    taint: str | None = None  # where the run first read untrusted words, if it has
    decided: Decided = field(default_factory=dict)  # used up as each call comes to run
    rounds: list[dict[str, Any]] = field(default_factory=list)  # each round's trace line
    answers: list[AnsweredRound] = field(default_factory=list)  # each round's, if recorded

    def tainted(self, source: str | None) -> None:
        """The run has read untrusted words from ``source`` (the first one is named)."""
        if self.taint is None:
            self.taint = source
