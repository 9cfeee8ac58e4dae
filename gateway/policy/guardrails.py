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
import time
from collections.abc import Callable, Sequence
from typing import Literal

import httpx

from gateway.config import GuardrailConfig, GuardrailKind, GuardrailOn
from gateway.ops.metrics import Metrics
from gateway.policy.detectors import Detectors, Finding, redacted
from gateway.policy.judges import (
    BuiltinJudge,
    HttpJudge,
    Judge,
    JudgeFailed,
    Judgement,
    ModelJudge,
    Subject,
)
from gateway.policy.models import ModelRoute
from gateway.upstream.servers import ModelServers
from tool_registry import EgressDenied, GuardedTransport, failure_words, immutable

# What became of a text, by one guardrail: acted on as configured, passed (nothing
# found), or unscreened because its judge failed and ``on_error: allow`` let it pass.
Action = Literal["block", "redact", "flag", "taint", "pass", "error"]


@immutable
class GuardVerdict:
    """One guardrail's verdict on one text, as the trace, the recording and the console
    show it: never the text itself, only what was found in it."""

    guardrail: str
    screens: GuardrailOn
    subject: str  # the tool's name, ``final_answer`` or ``input``
    action: Action
    found: tuple[str, ...] = ()
    call_id: str | None = None
    error: str | None = None
    kind: GuardrailKind = "builtin"  # who found it: the gateway's words, or a far side's

    def line(self) -> dict[str, object]:
        line: dict[str, object] = {
            "guardrail": self.guardrail,
            "screens": self.screens,
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


@immutable
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

    def __init__(
        self,
        metrics: Metrics | None = None,
        *,
        models: ModelServers | None = None,
        routes: Callable[[str], ModelRoute] | None = None,
        transport: GuardedTransport | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.detectors = Detectors()
        self._metrics = metrics
        self._models = models  # for judges: the model port, and the snapshot's routes
        self._routes = routes
        self._transport = transport  # for services: the one guarded way out
        self._clock = clock
        self._judges: dict[int, tuple[GuardrailConfig, Judge]] = {}

    def judge_of(self, config: GuardrailConfig) -> Judge:
        known = self._judges.get(id(config))
        if known is not None and known[0] is config:
            return known[1]
        judge = self._made(config)
        if len(self._judges) > 4096:  # configurations of past reloads
            self._judges.clear()
        self._judges[id(config)] = (config, judge)
        return judge

    def _made(self, config: GuardrailConfig) -> Judge:
        if config.kind == "model":
            if self._models is None or self._routes is None:
                raise JudgeFailed("no model servers to ask")
            return ModelJudge(config, self._models, self._routes)
        if config.kind == "http":
            if self._transport is None:
                raise JudgeFailed("no transport to send with")
            return HttpJudge(config, self._transport, self._clock)
        return BuiltinJudge(self.detectors, config)

    async def screen(
        self, guardrails: Sequence[GuardrailConfig], text: str, subject: Subject
    ) -> Screened:
        """``text`` as its reader may read it, after ``guardrails`` (each about it)."""
        if not guardrails:
            return Screened(text)
        if len(guardrails) == 1:
            judged = [await self._judged(guardrails[0], text, subject)]
        else:
            judged = list(
                await asyncio.gather(*(self._judged(g, text, subject) for g in guardrails))
            )
        verdicts = []
        blocked: GuardVerdict | None = None
        taint: str | None = None
        redactions: list[tuple[GuardrailConfig, Judgement]] = []
        for config, judgement in zip(guardrails, judged, strict=True):
            action = _action(config, judgement)
            verdict = GuardVerdict(
                guardrail=config.name,
                screens=subject.screens,
                subject=subject.name,
                action=action,
                found=judgement.found,
                call_id=subject.call_id,
                error=judgement.error,
                kind=config.kind,
            )
            verdicts.append(verdict)
            self._count(config.name, action)
            if action == "block" and blocked is None:
                blocked = verdict
            elif action == "taint" and taint is None:
                taint = f"guardrail {config.name!r} on {subject.name!r}"
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

    async def _judged(self, config: GuardrailConfig, text: str, subject: Subject) -> Judgement:
        """The guardrail's judgement, or why there is none (never raised: a judge's
        failure is its ``on_error``, not the request's)."""
        try:
            return await self.judge_of(config).judge(text, subject)
        except JudgeFailed as exc:
            return Judgement(error=str(exc))
        except TimeoutError:
            return Judgement(error=f"no verdict within {config.timeout_s:g}s")
        except (EgressDenied, httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
            return Judgement(error=failure_words(exc))
        except Exception as exc:  # a model server's error, or anything else
            return Judgement(error=f"the judge failed ({type(exc).__name__})")

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
    # Only the gateway's own labels are said: a judge's or a service's words, however
    # cleaned, would be a far side's words in the model's context (the trace has them).
    own = verdict.found and verdict.kind == "builtin"
    what = f" ({', '.join(verdict.found)})" if own else ""
    why = " could not be screened, and" if verdict.error is not None else ""
    if verdict.screens == "tool_result":
        return (
            f"The result of this call{why} was withheld by the gateway's guardrail "
            f"{verdict.guardrail!r}{what}; it is not shown. Answer without it, or tell the "
            "user it was withheld."
        )
    if verdict.screens == "final_answer":
        return (
            f"The answer{why} was withheld by the gateway's guardrail {verdict.guardrail!r}{what}."
        )
    return f"The request{why} was refused by the gateway's guardrail {verdict.guardrail!r}{what}."
