"""The model's answer, screened on its way to the client (docs/guardrails.md): whole when
it comes whole, in windows as it streams.

A streamed answer's text is held until ``window_chars`` of it are waiting, then screened;
what is shown is all of it but the last ``OVERLAP`` characters (and never part of a
span found: the cut moves before it), which wait for the next window, so a secret split
across the model's chunks is screened whole. At a round's end the rest is screened and
shown. So the client sees nothing the guardrails have not passed, at most
``window_chars`` + ``OVERLAP`` characters late; with ``stream: buffer`` the round is held
whole and screened once. A block ends the stream with an error (``GuardrailBlocked``),
after only text that was screened and passed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.errors import GuardrailBlocked
from gateway.policy.detectors import redacted
from gateway.policy.guardrails import Screened, refusal_text
from gateway.policy.ledger import Ledger
from gateway.policy.point import PolicyPoint

OVERLAP = 128  # characters held past a window: the longest secret screened whole across one
SUBJECT = "final_answer"


@dataclass(slots=True)
class AnswerScreen:
    """One loop's streamed answer text, screened as it goes (its round's shown text is
    kept: what the client saw is what the run keeps)."""

    policy: PolicyPoint
    ledger: Ledger
    window: int
    buffered: bool = False
    pending: str = ""  # received, not yet shown
    shown: list[str] = field(default_factory=list)  # this round's, as shown
    changed: bool = False  # a guardrail changed some of this round's text

    @classmethod
    def of(cls, policy: PolicyPoint, ledger: Ledger) -> AnswerScreen | None:
        """The screen of a loop's streamed answers, when guardrails screen them."""
        if policy.guard is None or not policy.rules.guardrails("final_answer"):
            return None
        guarding = policy.rules.guarding
        return cls(policy, ledger, guarding.window_chars, guarding.stream == "buffer")

    async def feed(self, text: str) -> str:
        """What of the answer so far may be shown now ("" while it is held)."""
        self.pending += text
        if self.buffered or len(self.pending) < self.window + OVERLAP:
            return ""
        screened = await self._screened(self.pending)
        if screened.rewritten:  # a service rewrote the window: it is shown whole
            whole, self.pending = self.pending, ""
            return self._show(whole, screened.text or "")
        cut = len(self.pending) - OVERLAP
        for found in screened.spans:  # never show half of what was found
            if found.start < cut < found.end:
                cut = found.start
        head, self.pending = self.pending[:cut], self.pending[cut:]
        return self._show(head, redacted(head, [f for f in screened.spans if f.end <= cut]))

    async def end_round(self) -> str:
        """The rest of a round's text, screened: shown before the round's tools run."""
        rest, self.pending = self.pending, ""
        if not rest:
            return ""
        return self._show(rest, (await self._screened(rest)).text or "")

    def round_text(self) -> str | None:
        """What the client was shown of the round just ended, if a guardrail changed
        it (the run keeps that, not what the model wrote); then a new round begins."""
        shown, changed = "".join(self.shown), self.changed
        self.shown, self.changed = [], False
        return shown if changed else None

    async def _screened(self, text: str) -> Screened:
        screened = await self.policy.screen(text, "final_answer", SUBJECT)
        self.ledger.guarded += screened.verdicts
        if screened.blocked is not None:
            raise GuardrailBlocked(refusal_text(screened.blocked))
        return screened

    def _show(self, text: str, shown: str) -> str:
        if shown != text:
            self.changed = True
        self.shown.append(shown)
        return shown
