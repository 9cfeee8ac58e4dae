"""Guardrails (docs/design.md §21, docs/guardrails.md): a text's screening by the
guardrails configured for it, and what their findings do.

Every guardrail of a text judges the same text, concurrently; then a ``block`` wins (the
reader gets a refusal naming the guardrail, never the text), else every ``redact``'s spans
are replaced (an HTTP service's rewritten text is taken and the local detectors' spans are
found again in it), ``taint`` marks the run, and ``flag`` only records. A judge that fails
is its ``on_error``: ``allow`` passes the text (the verdict says it went unscreened),
``block`` blocks it. Each verdict is a ``GuardVerdict`` for the trace, and is counted in
``toolgate_guardrail_verdicts_total{guardrail,action}``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from gateway.config import GuardrailConfig, GuardrailOn
from gateway.ops.metrics import Metrics
from gateway.policy.detectors import Detectors, Finding, redacted

# Past this many characters a text's detectors run on a worker thread: a megabyte of
# result keeps the event loop free (RE2 releases the GIL while it matches).
OFFLOAD_CHARS = 64 * 1024
MAX_FOUND = 16  # the labels a verdict names, at most

# What became of a text, by one guardrail: acted on as configured, passed (nothing
# found), or unscreened because its judge failed and ``on_error: allow`` let it pass.
Action = Literal["block", "redact", "flag", "taint", "pass", "error"]


@dataclass(frozen=True, slots=True)
class Judgement:
    """A judge's answer on one text: what it found (labels; none: the text passes), where
    (for ``redact``), the text it would have read instead (an HTTP service's), or why it
    could not judge."""

    found: tuple[str, ...] = ()
    spans: tuple[Finding, ...] = ()
    rewritten: str | None = None
    error: str | None = None


class Judge(Protocol):
    """How one guardrail judges a text (``subject``: the tool's name, ``final_answer`` or
    ``input``)."""

    async def judge(self, text: str, on: GuardrailOn, subject: str) -> Judgement: ...


class BuiltinJudge:
    """The built-in detectors of ``kinds``."""

    def __init__(self, detectors: Detectors, config: GuardrailConfig) -> None:
        self._detectors = detectors
        self._kinds = tuple(config.detect)

    def find(self, text: str) -> list[Finding]:
        return self._detectors.find(text, self._kinds)

    async def judge(self, text: str, on: GuardrailOn, subject: str) -> Judgement:
        if len(text) > OFFLOAD_CHARS:
            found = await asyncio.to_thread(self.find, text)
        else:
            found = self.find(text)
        return Judgement(tuple(dict.fromkeys(f.label for f in found))[:MAX_FOUND], tuple(found))


@dataclass(frozen=True, slots=True)
class GuardVerdict:
    """One guardrail's verdict on one text, as the trace, the recording and the console
    show it: never the text itself, only what was found in it."""

    guardrail: str
    on: GuardrailOn
    subject: str  # the tool's name, ``final_answer`` or ``input``
    action: Action
    found: tuple[str, ...] = ()
    call_id: str | None = None
    error: str | None = None

    def line(self) -> dict[str, object]:
        line: dict[str, object] = {
            "guardrail": self.guardrail,
            "on": self.on,
            "subject": self.subject,
            "action": self.action,
        }
        if self.found:
            line["found"] = list(self.found)
        if self.call_id is not None:
            line["call_id"] = self.call_id
        if self.error is not None:
            line["error"] = self.error
        return line


@dataclass(frozen=True, slots=True)
class Screened:
    """A text after its guardrails: what its reader reads (``None``: blocked, by
    ``blocked``), every verdict, and the guardrail that taints the run, if one does."""

    text: str | None
    verdicts: tuple[GuardVerdict, ...] = ()
    blocked: GuardVerdict | None = None
    taint: str | None = None
    # Where the text's redactions are (in the text as it came), unless a service
    # rewrote it (``rewritten``: then ``text`` is the service's, with the spans found in it).
    spans: tuple[Finding, ...] = ()
    rewritten: bool = False


class Guard:
    """The gateway's guardrails service: each configured guardrail's judge, made once per
    configuration (a reload makes new ones), and the screening of a text by a tuple of
    them."""

    def __init__(self, metrics: Metrics | None = None) -> None:
        self.detectors = Detectors()
        self._metrics = metrics
        self._judges: dict[int, tuple[GuardrailConfig, Judge]] = {}

    def judge_of(self, config: GuardrailConfig) -> Judge:
        known = self._judges.get(id(config))
        if known is not None and known[0] is config:
            return known[1]
        judge = BuiltinJudge(self.detectors, config)
        if len(self._judges) > 4096:  # configurations of past reloads
            self._judges.clear()
        self._judges[id(config)] = (config, judge)
        return judge

    async def screen(
        self,
        guardrails: Sequence[GuardrailConfig],
        text: str,
        on: GuardrailOn,
        subject: str,
        call_id: str | None = None,
    ) -> Screened:
        """``text`` as its reader may read it, after ``guardrails`` (each about it)."""
        if not guardrails:
            return Screened(text)
        if len(guardrails) == 1:
            judged = [await self._judged(guardrails[0], text, on, subject)]
        else:
            judged = list(
                await asyncio.gather(*(self._judged(g, text, on, subject) for g in guardrails))
            )
        verdicts = []
        blocked: GuardVerdict | None = None
        taint: str | None = None
        redactions: list[tuple[GuardrailConfig, Judgement]] = []
        for config, judgement in zip(guardrails, judged, strict=True):
            action = _action(config, judgement)
            verdict = GuardVerdict(
                config.name, on, subject, action, judgement.found, call_id, judgement.error
            )
            verdicts.append(verdict)
            self._count(config.name, action)
            if action == "block" and blocked is None:
                blocked = verdict
            elif action == "taint" and taint is None:
                taint = f"guardrail {config.name!r} on {subject!r}"
            elif action == "redact":
                redactions.append((config, judgement))
        if blocked is not None:
            return Screened(None, tuple(verdicts), blocked, taint)
        if not redactions:
            return Screened(text, tuple(verdicts), None, taint)
        rewritten = next((j.rewritten for _, j in redactions if j.rewritten is not None), None)
        if rewritten is None:
            spans = tuple(f for _, j in redactions for f in j.spans)
            return Screened(redacted(text, spans), tuple(verdicts), None, taint, spans)
        # A service's rewritten text is taken, and the local detectors look at it again.
        spans = tuple(f for config, _ in redactions for f in self._found(config, rewritten))
        return Screened(redacted(rewritten, spans), tuple(verdicts), None, taint, spans, True)

    async def _judged(
        self, config: GuardrailConfig, text: str, on: GuardrailOn, subject: str
    ) -> Judgement:
        try:
            return await self.judge_of(config).judge(text, on, subject)
        except Exception as exc:  # a judge's own failure is its on_error, never the request's
            return Judgement(error=type(exc).__name__)

    def _found(self, config: GuardrailConfig, text: str) -> list[Finding]:
        judge = self.judge_of(config)
        return judge.find(text) if isinstance(judge, BuiltinJudge) else []

    def _count(self, guardrail: str, action: Action) -> None:
        if self._metrics is not None:
            self._metrics.guardrail_verdicts.labels(guardrail, action).inc()


def _action(config: GuardrailConfig, judgement: Judgement) -> Action:
    if judgement.error is not None:
        return "block" if config.on_error == "block" else "error"
    if not judgement.found:
        return "pass"
    return config.action


def refusal_text(verdict: GuardVerdict) -> str:
    """What a reader gets in place of a blocked text: the guardrail's name and what it
    found, never the text."""
    what = f" ({', '.join(verdict.found)})" if verdict.found else ""
    why = " could not be screened, and" if verdict.error is not None else ""
    if verdict.on == "tool_result":
        return (
            f"The result of this call{why} was withheld by the gateway's guardrail "
            f"{verdict.guardrail!r}{what}; it is not shown. Answer without it, or tell the "
            "user it was withheld."
        )
    if verdict.on == "final_answer":
        return (
            f"The answer{why} was withheld by the gateway's guardrail {verdict.guardrail!r}{what}."
        )
    return f"The request{why} was refused by the gateway's guardrail {verdict.guardrail!r}{what}."
