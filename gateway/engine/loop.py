"""The loop engine (docs/design.md §5, §10): ask the model, let the policy point decide,
run the tools or hand calls back, ask again — one round skeleton for every mode.

``Run.events`` is the loop. It yields what a driver needs to know, in order:

- ``ChoiceDelta``: text the client may see at once (streamed rounds only);
- ``Working``: work to do before the loop goes on (tools running, or a turn being
  kept before a hand-back) — the driver runs it, with keep-alives if it streams;
- ``HandBack``: the client's own calls, which end the loop;
- ``Final``: the answer, which ends the loop.

The engine works on the values of ``gateway.values`` only: it asks its ``ModelServer``
port (``upstream.port``) with a ``CompletionRequest`` and gets a ``Completion`` back, in
whichever dialect the upstream speaks. ``ToolLoop.run`` is the non-streaming
driver (it keeps the last event), ``engine.stream`` the streaming one (it yields every
event); a surface encodes what they give in its own wire format.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar

from gateway.engine.estimate import PromptSize
from gateway.engine.offer import Offer
from gateway.engine.readable import screened_answer
from gateway.engine.runner import Credentials, ToolRunner
from gateway.errors import GatewayError, RequestTimeout
from gateway.ops.metrics import Metrics
from gateway.ops.offload import offload
from gateway.ops.spans import RequestSpan, RoundSpan
from gateway.policy.answer_screen import AnswerScreen
from gateway.policy.caps import BUDGET_CAPS, CAP_SETTINGS, Step
from gateway.policy.guardrails import GuardVerdict
from gateway.policy.ledger import Decided, Ledger, RoundLine, Search
from gateway.policy.point import PolicyPoint
from gateway.policy.run_budget import RoundGrant, RunBudget, Stop
from gateway.store.kept_writes import RequestWrites
from gateway.store.result_cache import ResultCache
from gateway.upstream.port import ModelServer
from gateway.values import (
    AnsweredRound,
    AssistantMessage,
    ChoiceDelta,
    Completion,
    CompletionRequest,
    HiddenItem,
    KeepTurn,
    ToolCall,
    ToolDefinition,
    ToolOutput,
)
from tool_registry import CallContext, Deadline, ToolExecutor, immutable

T = TypeVar("T")


@immutable
class Working:
    start: Callable[[], Coroutine[Any, Any, None]]  # called by the driver: nothing runs unasked


@immutable
class HandBack:
    calls: tuple[ToolCall, ...]  # the client's calls, as the client is to see them
    answer: Completion  # its turn as kept: the server calls of the same turn included


@immutable
class Final:
    answer: Completion
    finish_reason: str
    dropped: bool  # the model still asked for tools that will not run


Event = ChoiceDelta | Working | HandBack | Final
LoopEnd = HandBack | Final  # how a loop ended


class Resumed:
    """The held calls a request's history ends with, whose approvals the client has
    answered (``PolicyPoint.resume`` decided each: ``decided``): run once per request,
    before its first round, whichever of its choices comes first."""

    def __init__(self, calls: tuple[ToolCall, ...], decided: Decided) -> None:
        self.calls = calls
        self.decided = decided
        self._lock = asyncio.Lock()
        self._outputs: list[ToolOutput] | None = None

    async def outputs(self, runner: ToolRunner, deadline: float) -> list[ToolOutput]:
        async with self._lock:
            if self._outputs is None:
                self._outputs, _ = await runner.run(self.calls, len(self.calls), deadline)
        return self._outputs


@immutable
class LoopJob:
    """Everything one loop needs, from its surface."""

    model: ModelServer
    policy: PolicyPoint  # the request's: its tools, caps, rules and approver
    context: CallContext
    keep: KeepTurn | None = None
    single_call_id: str | None = None  # hand back one call only, under this id
    choice: int = 0  # which of the request's ``n`` choices this loop answers
    resumed: Resumed | None = None
    trace: RequestSpan | None = None  # the request's span, when tracing is on
    record: bool = False  # keep each round's answer, for a recording (issue 26)
    writes: RequestWrites | None = None  # its write results, kept for its retries
    budget: RunBudget | None = None  # what the run may spend, when anything counts
    taint: str | None = None  # where the request's input first held untrusted words
    guarded: tuple[GuardVerdict, ...] = ()  # the guardrails' verdicts on its input
    spent: tuple[Any, ...] = ()  # usage spent for the request before its loop (a summary)
    offer: Offer | None = None  # the first round's server tools, when a search chooses them
    credentials: Credentials | None = None  # the user's tokens, for tools that act as them


class Run:
    """One loop (one choice of a request) going round: its history, its tools, its
    deadline, and how it ended."""

    def __init__(
        self,
        job: LoopJob,
        ledger: Ledger,
        executor: ToolExecutor,
        cache: ResultCache | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.job = job
        self.policy = job.policy
        self.ledger = ledger  # the request's, shared by its choices
        self.state = ledger.state
        self.runner = ToolRunner(
            job.policy,
            ledger,
            executor,
            job.context,
            cache,
            metrics,
            job.trace,
            job.writes,
            job.credentials,
        )
        self._clock = asyncio.get_running_loop()
        self._deadline = self._clock.time() + job.policy.limits.request_timeout_s
        self._deadline_timer = Deadline(self._deadline)  # one timer for the run's waits
        self.hidden: list[HiddenItem] = []  # the rounds the client does not see
        self.outcome: LoopEnd | None = None  # how the loop ended, once it has
        self.handed_outputs: list[ToolOutput] = []  # of the server calls of a hand-back turn
        self.error: GatewayError | None = None
        self._asked: tuple[ToolCall, ...] = ()  # approvals the client is asked for
        self._prompt: PromptSize | None = None  # for budgets: the next prompt's size
        self.offer = job.offer  # the next round's server tools, when a search chooses them
        self._metrics = metrics

    @property
    def stopped(self) -> str | None:
        """The cap that forced this request's last round, as the configuration names it."""
        return CAP_SETTINGS[self.state.stopped] if self.state.stopped is not None else None

    async def events(self, stream: bool) -> AsyncIterator[Event]:
        """The loop, to its end (``HandBack`` or ``Final``)."""
        try:
            limits, state, first = self.policy.limits, self.state, True
            if self.job.resumed is not None:
                yield Working(self._resume)
            answer: Completion | None = None
            shown = ""  # the last text streamed: the next round's first is set apart from it
            answers_screened = stream and self.policy.screens_answers
            screen = AnswerScreen.of(self.policy, self.ledger) if answers_screened else None
            while True:
                started = time.perf_counter()
                grant: RoundGrant | None = None
                budget = self.ledger.budget
                if budget is not None:
                    verdict = await self.policy.before_round(
                        self.ledger, self._next_prompt(), self._client_max, first
                    )
                    if isinstance(verdict, Stop):  # no round fits: the answer so far is the answer
                        assert answer is not None  # the first round is refused instead
                        finish = "length"
                        if not stream and self.policy.screens_answers:
                            answer, finish, _ = await self._screened(answer, finish)
                        self.outcome = Final(answer, finish, bool(answer.turn.calls))
                        yield self.outcome
                        return
                    grant = verdict
                iteration, final = state.begin_round(limits)
                max_tokens = grant.max_tokens if grant is not None else None
                span = self._round_span(iteration, final, max_tokens)
                trace = span.headers if span is not None else None
                offered = self._offered() if not final else None
                ask = CompletionRequest(self.hidden, first, final, max_tokens, trace, offered)
                first = False
                try:
                    if stream:
                        answer = None
                        apart = shown  # this round's first text follows an earlier round's
                        async for delta in self._streamed(ask):
                            if isinstance(delta, Completion):
                                answer = delta
                                continue
                            if screen is not None:  # the guardrails pass it first
                                delta = await screened(screen, delta)
                                if not delta.delta:
                                    continue  # held
                            text = delta.delta.get("content")
                            if text:
                                if apart:
                                    delta = set_apart(delta, shown)
                                    apart = ""
                                shown = text
                            yield delta
                        assert answer is not None  # a model server's stream ends with its round
                        if screen is not None:
                            rest = await screen.end_round()
                            if rest:
                                piece = ChoiceDelta({"content": rest})
                                yield set_apart(piece, shown) if apart else piece
                                shown = rest
                            text = screen.round_text()
                            if text is not None:  # the run keeps what the client saw
                                answer = replace(answer, turn=replace(answer.turn, content=text))
                    else:
                        answer = await self._within_deadline(self.job.model.answer(ask))
                except BaseException as exc:
                    if span is not None:
                        span.failed(exc)
                    if grant is not None and budget is not None:
                        budget.release(grant)
                    raise
                if span is not None:
                    span.answered(answer, self.job.model.transcript(ask) if span.capture else None)
                if self.offer is not None and self.offer.searched_heavily(answer.turn.calls):
                    await offload(True, self.offer.found, answer.turn.calls)  # off the loop
                self._count(answer, iteration, final, started, grant, offered is not None)
                turn = answer.turn
                if self.offer is not None and turn.calls:
                    self.offer = self.offer.after(turn.calls)
                time_left = self._deadline - self._clock.time()
                step = self.policy.round(self.ledger, turn.calls, final, time_left)
                if step.kind == "run_tools":
                    yield Working(partial(self._run_tools, turn, step.runnable))
                    if not self._asked:
                        continue
                    self.outcome = await self._handing_back(stream, answer, self._asked)
                    yield self.outcome  # approvals only
                    return
                if step.kind == "hand_back":
                    turn, handed = self._handed(turn, step)
                    yield Working(partial(self._hand_back, turn, step, handed))
                    back = replace(answer, turn=turn)
                    self.outcome = await self._handing_back(stream, back, handed + self._asked)
                    yield self.outcome
                    return
                dropped = bool(turn.calls) or answer.finish_reason == "tool_calls"
                finish = "stop" if dropped else answer.finish_reason or "stop"
                if state.stopped in BUDGET_CAPS:
                    finish = "length"  # the budget cut the run short (docs/design.md §13)
                if dropped and not (answer.turn.content or "").strip():
                    # A model that still only calls tools when it may not (llama.cpp's
                    # Messages endpoint ignores tool_choice none): never an empty answer
                    # presented as a normal end.
                    answer, finish = self._unanswered(answer), "length"
                    if stream:
                        yield ChoiceDelta({"content": answer.turn.content or ""})
                if not stream and self.policy.screens_answers:
                    answer, finish, _ = await self._screened(answer, finish)
                answer, added = self._linked(answer, shown if stream else answer.turn.content)
                if added and stream:  # in the stream itself, as the answer's last words
                    yield ChoiceDelta({"content": added})
                self.outcome = Final(answer, finish, bool(turn.calls))
                yield self.outcome
                return
        finally:
            self._deadline_timer.close()  # the run is over: its timer goes

    def _linked(self, answer: Completion, before: str | None) -> tuple[Completion, str]:
        """The answer with a line for each connection the user must make that the
        model's words left out (its link, whole: a link the model retyped may be cut or
        changed), and what was added (set apart from ``before``, the text shown last);
        the same on every surface, streamed or not."""
        text = answer.turn.content or ""
        missing = [link for link in self.ledger.connects if link.url not in text]
        if not missing:
            return answer, ""
        piece = ChoiceDelta({"content": "\n\n".join(dict.fromkeys(m.words() for m in missing))})
        added = (set_apart(piece, before) if before else piece).delta["content"]
        turn = replace(answer.turn, content=text + added)
        return replace(answer, turn=turn, raw=None), added

    def _unanswered(self, answer: Completion) -> Completion:
        """The answer of a last round that asked for tools and said nothing: the
        gateway's words saying so, in place of none."""
        cap = self.stopped or "the tool budget"
        words = (
            f"[No answer: the model asked for more tools after {cap} was reached, "
            "and gave no text. Ask again, or raise the limit.]"
        )
        return replace(answer, turn=replace(answer.turn, content=words), raw=None)

    async def _handing_back(
        self, stream: bool, answer: Completion, calls: tuple[ToolCall, ...]
    ) -> LoopEnd:
        """A hand-back of ``calls`` with ``answer``, every text of both the client's to
        read screened first (streamed, the calls' arguments only: its text was screened
        as it went); a blocked one ends the run with its refusal instead."""
        if not self.policy.screens_answers:
            return HandBack(calls, answer)
        answer, finish, given = await self._screened(answer, "tool_calls", calls, not stream)
        return HandBack(given, answer) if given is not None else Final(answer, finish, True)

    async def _screened(
        self,
        answer: Completion,
        finish: str,
        calls: tuple[ToolCall, ...] = (),
        texts: bool = True,
    ) -> tuple[Completion, str, tuple[ToolCall, ...] | None]:
        """``screened_answer`` by this run's policy, its verdicts in its ledger."""
        return await screened_answer(self.policy, self.ledger, answer, finish, calls, texts)

    async def _streamed(self, ask: CompletionRequest) -> AsyncIterator[ChoiceDelta | Completion]:
        """One streamed round, every wait within the request's deadline."""
        pieces = self.job.model.stream(ask)
        try:
            while (piece := await self._within_deadline(anext(pieces, None))) is not None:
                yield piece
        finally:
            aclose = getattr(pieces, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _within_deadline(self, awaitable: Awaitable[T]) -> T:
        """Await an upstream step within ``request_timeout_s`` (504 past it). The last
        round forced because the time ran out is bounded by the upstream's own timeout."""
        if self.state.forced_final and self._clock.time() >= self._deadline:
            return await awaitable
        try:
            return await self._deadline_timer.within(awaitable)
        except TimeoutError as exc:
            raise RequestTimeout(
                "The request took longer than request_timeout_s "
                f"({self.policy.limits.request_timeout_s:g}s)."
            ) from exc

    def _offered(self) -> tuple[ToolDefinition, ...] | None:
        """The server tools the next round offers when a search chooses them: the
        offer's, then the search function."""
        offer = self.offer
        if offer is None:
            return None
        definitions = self.policy.registry.definitions(offer.names)
        return (*definitions, *offer.catalog.definitions)

    def _round_span(self, iteration: int, final: bool, max_tokens: int | None) -> RoundSpan | None:
        trace = self.job.trace
        if trace is None:
            return None
        model = self.job.model
        bound = max_tokens if max_tokens is not None else model.client_max_tokens
        return trace.round(
            model.name,
            model.base_url,
            model.model,
            iteration=iteration,
            final=final,
            max_tokens=bound,
            choice=self.job.choice,
        )

    @property
    def _client_max(self) -> int | None:
        return self.job.model.client_max_tokens

    def _next_prompt(self) -> int:
        if self._prompt is None:
            self._prompt = PromptSize(self.job.model.prompt_bytes())
        return self._prompt.next(self.hidden)

    def _count(
        self,
        answer: Completion,
        iteration: int,
        final: bool,
        started: float,
        grant: RoundGrant | None = None,
        searched: bool = False,
    ) -> None:
        """A round's answer arrived: its usage, its cost, and its line in the trace
        (with the tools a search chose for it, ``searched``, and the searches it made)."""
        duration_ms = round((time.perf_counter() - started) * 1000, 3)
        ledger, choice = self.ledger, self.job.choice
        if self.job.record:
            ledger.answers.append(AnsweredRound(iteration, answer, choice))
        spent = None
        if grant is not None and ledger.budget is not None:
            spent = ledger.budget.after_round(grant, answer.usage)
            if self._prompt is not None:
                self._prompt.counted(answer.usage, self.hidden)
        ledger.state.count_round(answer.usage)
        calls = tuple(call.name for call in answer.turn.calls)
        offered: tuple[str, ...] | None = None
        searches: tuple[Search, ...] = ()
        preselected: tuple[tuple[str, tuple[str, ...]], ...] = ()
        if searched and self.offer is not None:
            offered = self.offer.names
            searches = self.offer.searches(answer.turn.calls)
            if not any(line.choice == choice for line in ledger.rounds):
                preselected = self.offer.preselection()
            if self._metrics is not None:
                self._metrics_of_search(self.offer, offered, searches)
        ledger.rounds.append(
            RoundLine(
                iteration,
                self.job.model.name,
                duration_ms,
                answer.usage,
                final,
                calls,
                choice,
                spent,
                offered,
                searches,
                started,
                preselected,
            )
        )

    def _metrics_of_search(
        self, offer: Offer, offered: tuple[str, ...], searches: tuple[Search, ...]
    ) -> None:
        assert self._metrics is not None
        tenant, metrics = self.job.context.tenant_id, self._metrics
        saved = offer.catalog.bytes_saved(offered)
        if saved > 0:
            metrics.tool_bytes_saved.labels(tenant).inc(saved)
        for search in searches:
            metrics.tool_searches.labels(tenant, "true" if search.found else "false").inc()

    async def _resume(self) -> None:
        """Run the held calls the client has answered, before the first round."""
        assert self.job.resumed is not None
        self.hidden += await self.job.resumed.outputs(self.runner, self._deadline)

    async def _run_tools(self, turn: AssistantMessage, runnable: int) -> None:
        """Run the turn's calls and add the turn and their outputs to the history; if
        the client is to approve some of them, keep the turn for its answer instead."""
        outputs, timed_out = await self.runner.run(turn.calls, runnable, self._deadline)
        if timed_out:
            self.state.time_ran_out(self.policy.limits)
        if self.runner.held:
            self._asked = await self.policy.hand_to_client(self.runner.held)
            self.handed_outputs = outputs
            if self.job.keep is not None:
                await self.job.keep(self.hidden, turn, outputs, self._asked, self.ledger.taint)
            return
        self.hidden += [turn, *outputs]

    def _handed(
        self, turn: AssistantMessage, step: Step
    ) -> tuple[AssistantMessage, tuple[ToolCall, ...]]:
        """The turn as it is kept, and the client calls to hand back. With
        ``single_call_id`` (the legacy ``functions`` shape holds one call) the first is
        handed back under that id, and the others leave the turn."""
        single = self.job.single_call_id
        if single is None:
            return turn, step.calls
        first = step.calls[0]
        kept = replace(first, id=single)
        others = {id(call) for call in step.calls[1:]}
        calls = tuple(kept if c is first else c for c in turn.calls if id(c) not in others)
        return replace(turn, calls=calls), (kept,)

    async def _hand_back(
        self, turn: AssistantMessage, step: Step, handed: tuple[ToolCall, ...]
    ) -> None:
        """Before handing client calls back: run the server calls of the same turn, and
        keep every hidden item of the loop — earlier rounds and this one — for when the
        client returns (``LoopJob.keep``, docs/design.md §6)."""
        outputs: list[ToolOutput] = []
        if step.hidden:
            outputs, _ = await self.runner.run(step.hidden, step.runnable, self._deadline)
            if self.runner.held:
                self._asked = await self.policy.hand_to_client(self.runner.held)
        self.handed_outputs = outputs
        if self.job.keep is not None and (step.hidden or self.hidden):
            taint = self.ledger.taint
            await self.job.keep(self.hidden, turn, outputs, handed + self._asked, taint)

    def mark_failure(self, exc: GatewayError) -> None:
        """Once a write ran whose result is not kept for a retry, SDKs must not replay
        the request; kept writes let them (the retry gets the kept result)."""
        self.error = exc
        if self.state.unkept_writes:
            exc.headers["x-should-retry"] = "false"


ROUND_SEPARATOR = "\n\n"  # between the streamed texts of two rounds: a new paragraph


async def screened(screen: AnswerScreen, delta: ChoiceDelta) -> ChoiceDelta:
    """A streamed delta with its text as the guardrails let it be shown now (none while
    held); its logprobs go (they would tell the text), and so do its other texts."""
    # Other texts of the delta (a reasoning_content's pieces) are left out: only the
    # answer's text is screened, in windows, and no text goes out unscreened.
    kept = {"role": delta.delta["role"]} if "role" in delta.delta else {}
    text = delta.delta.get("content")
    if not text:
        return ChoiceDelta(kept)
    shown = await screen.feed(text)
    return ChoiceDelta({**kept, "content": shown} if shown else kept)


def set_apart(piece: ChoiceDelta, before: str) -> ChoiceDelta:
    """The first text of a round after one whose text was streamed (``before`` ends
    it), begun with a blank line: "…first." and "It has 4 characters." read as two
    paragraphs, not one word (a text that already ends with line breaks gets fewer)."""
    ending = len(before) - len(before.rstrip("\n"))
    separator = ROUND_SEPARATOR[min(ending, len(ROUND_SEPARATOR)) :]
    if not separator:
        return piece
    return replace(piece, delta={**piece.delta, "content": separator + piece.delta["content"]})


def _first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """What a failing choice raised (the others were cancelled for it)."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return _first_error(exc)
        if not isinstance(exc, asyncio.CancelledError):
            return exc
    return group.exceptions[0]


class ToolLoop:
    """Runs loops for requests that have server tools in play."""

    def __init__(
        self,
        executor: ToolExecutor,
        keepalive_s: float = 10.0,
        cache: ResultCache | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self._executor = executor
        self.keepalive_s = keepalive_s
        self._cache = cache
        self._metrics = metrics

    def runs(self, job: LoopJob, n: int = 1) -> list[Run]:
        """One run per choice of the request, sharing its policy and its ledger (caps,
        usage, spend, taint, trace lines)."""
        decided = dict(job.resumed.decided) if job.resumed is not None else {}
        ledger = Ledger(
            budget=job.budget, taint=job.taint, decided=decided, guarded=list(job.guarded)
        )
        for usage in job.spent:
            ledger.state.usage.add(usage)
        return [
            Run(
                replace(job, choice=i) if i else job,
                ledger,
                self._executor,
                self._cache,
                self._metrics,
            )
            for i in range(n)
        ]

    async def run_all(self, runs: list[Run]) -> list[LoopEnd]:
        """How every choice's loop ended, run concurrently; the first failure ends them all."""
        if len(runs) == 1:
            return [await self.run(runs[0])]
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(self.run(run)) for run in runs]
        except BaseExceptionGroup as failed:
            raise _first_error(failed) from None
        return [task.result() for task in tasks]

    async def run(self, run: Run) -> LoopEnd:
        """The non-streaming driver: runs the work, keeps the last event."""
        try:
            async for event in run.events(stream=False):
                if isinstance(event, Working):
                    await event.start()
        except GatewayError as exc:
            run.mark_failure(exc)
            raise
        assert run.outcome is not None  # the engine ends every loop with one
        return run.outcome
