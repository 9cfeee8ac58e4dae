"""The server-side tool loop: ask, run tools, ask again (DESIGN.md §5).

``LoopSession`` holds one loop's state and the steps of a round; the engine
(``engine.rounds``) is the one round skeleton; ``ToolLoop.run`` drives it without
streaming, ``stream_loop`` with. A surface builds the ``LoopJob`` and renders what the
drivers give.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from gateway.config import UpstreamConfig
from gateway.engine.rounds import Final, HandBack, ModelServer, Working, rounds
from gateway.engine.runner import ToolRunner
from gateway.errors import GatewayError, RequestTimeout
from gateway.ops.metrics import Metrics
from gateway.policy.caps import LoopState, Step, decide
from gateway.policy.limits import LoopLimits
from gateway.store.result_cache import ResultCache
from gateway.upstream import dialect
from gateway.values import Hidden, KeepTurn, Round, ToolCall, ToolOutput, Turn
from tool_registry import CallContext, ToolExecutor, ToolRegistry

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class LoopJob:
    """Everything one loop needs, from its surface."""

    upstream: UpstreamConfig
    body: dict[str, Any]  # the request in the upstream dialect: parameters, visible history
    client_model: str
    upstream_model: str
    server_tools: tuple[str, ...]
    client_tools: list[dict[str, Any]]  # in the upstream dialect
    client_tool_names: frozenset[str]
    limits: LoopLimits
    context: CallContext
    registry: ToolRegistry  # of the runtime snapshot the request read
    keep: KeepTurn | None = None
    single_call_id: str | None = None  # hand back one call only, under this id
    choice: int = 0  # which of the request's ``n`` choices this loop answers


class LoopSession:
    """One loop going round: its history, its runner, its deadline."""

    def __init__(
        self,
        job: LoopJob,
        executor: ToolExecutor,
        cache: ResultCache | None = None,
        metrics: Metrics | None = None,
        state: LoopState | None = None,
    ) -> None:
        self.job = job
        self._round_started = time.perf_counter()
        self._round: dict[str, Any] = {}  # this session's last round, in the trace
        self._rounds_made = 0
        self._iteration = 0
        self.error: GatewayError | None = None
        # The choices of one request (``n``) share one state: the caps, the usage and
        # the trace are the request's.
        self.state = state if state is not None else LoopState()
        available = list(job.server_tools)
        if job.client_tool_names:
            available += sorted(job.client_tool_names)
        self.runner = ToolRunner(
            job.registry,
            executor,
            job.context,
            frozenset(job.server_tools),
            available,
            job.limits.max_parallel_tools,
            self.state,
            cache,
            metrics,
        )
        self._clock = asyncio.get_running_loop()
        self._deadline = self._clock.time() + job.limits.request_timeout_s
        self._tools = [*job.registry.definitions(job.server_tools), *job.client_tools]
        self.hidden: list[Hidden] = []  # the rounds the client does not see
        self.outcome: HandBack | Final | None = None  # how the loop ended, once it has
        self.handed_outputs: list[ToolOutput] = []  # of the server calls of a hand-back turn
        self._messages: list[dict[str, Any]] = list(job.body["messages"])  # and in dialect
        self._final = False

    async def within_deadline(self, awaitable: Awaitable[T]) -> T:
        """Await an upstream step within ``request_timeout_s`` (504 past it). The last
        round forced because the time ran out is bounded by the upstream's own timeout."""
        if self.state.forced_final and self._clock.time() >= self._deadline:
            return await awaitable
        try:
            async with asyncio.timeout_at(self._deadline):
                return await awaitable
        except TimeoutError as exc:
            raise self.timeout_error() from exc

    def next_round(self, stream: bool) -> dict[str, Any]:
        """The request of the next round, counted from now."""
        self._round_started = time.perf_counter()
        self._iteration, self._final = self.state.begin_round(self.job.limits)
        job = self.job
        choice = dialect.round_tool_choice(
            job.body.get("tool_choice"), self._rounds_made == 0, self._final, job.client_tool_names
        )
        return dialect.round_body(
            job.body, job.upstream_model, self._messages, self._tools, stream, choice
        )

    def timeout_error(self) -> RequestTimeout:
        return RequestTimeout(
            "The request took longer than request_timeout_s "
            f"({self.job.limits.request_timeout_s:g}s)."
        )

    def decide(self, answer: Round) -> Step:
        """Count the round's answer and decide what comes next."""
        self._rounds_made += 1
        calls = answer.turn.calls
        usage = answer.usage
        self._round = {
            "iteration": self._iteration,
            "upstream": self.job.upstream.name,
            "duration_ms": round((time.perf_counter() - self._round_started) * 1000, 3),
            "usage": usage if isinstance(usage, dict) else None,
            "forced_final": self._final,
            "tool_calls": [call.name for call in calls],
        }
        if self.job.choice:
            self._round["choice"] = self.job.choice
        self.state.count_round(self._round, usage)
        step = decide(
            self.state,
            self.job.limits,
            calls,
            self.runner.server_tools,
            self.job.client_tool_names,
            self._final,
            self._deadline - self._clock.time(),
        )
        self.state.take(step, self.job.limits)
        return step

    def _extend(self, items: list[Hidden]) -> None:
        self.hidden += items
        self._messages += dialect.messages(items)

    async def run_tools(self, turn: Turn, runnable: int) -> None:
        """Run the turn's calls and add the turn and their outputs to the history."""
        outputs, timed_out = await self.runner.run(turn.calls, runnable, self._deadline)
        if timed_out:
            self.state.time_ran_out(self.job.limits)
        self._extend([turn, *outputs])

    def handed(self, turn: Turn, step: Step) -> tuple[Turn, tuple[ToolCall, ...]]:
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

    async def hand_back(self, turn: Turn, step: Step, handed: tuple[ToolCall, ...]) -> None:
        """Before handing client calls back: run the server calls of the same turn, and
        keep every hidden item of the loop — earlier rounds and this one — for when the
        client returns (``LoopJob.keep``, DESIGN.md §6)."""
        outputs: list[ToolOutput] = []
        if step.hidden:
            outputs, _ = await self.runner.run(step.hidden, step.runnable, self._deadline)
        self.handed_outputs = outputs
        if self.job.keep is not None and (step.hidden or self.hidden):
            await self.job.keep(self.hidden, turn, outputs, handed)

    def mark_failure(self, exc: GatewayError) -> None:
        """Once a side-effecting tool ran, SDKs must not replay the request."""
        self.error = exc
        if self.state.side_effects:
            exc.headers["x-should-retry"] = "false"


def _first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """What a failing choice raised (the others were cancelled for it)."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return _first_error(exc)
        if not isinstance(exc, asyncio.CancelledError):
            return exc
    return group.exceptions[0]


Outcome = HandBack | Final  # how a loop ended


class ToolLoop:
    """Runs loops for requests that have server tools in play."""

    def __init__(
        self,
        upstream: ModelServer,
        executor: ToolExecutor,
        keepalive_s: float = 10.0,
        cache: ResultCache | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.upstream = upstream
        self._cache = cache
        self._metrics = metrics
        self.keepalive_s = keepalive_s
        self._executor = executor

    def session(self, job: LoopJob, state: LoopState | None = None) -> LoopSession:
        return LoopSession(job, self._executor, self._cache, self._metrics, state)

    def sessions(self, job: LoopJob, n: int) -> list[LoopSession]:
        """One session per choice of the request, sharing its state and caps."""
        first = self.session(job)
        rest = [self.session(replace(job, choice=i), first.state) for i in range(1, n)]
        return [first, *rest]

    async def run_all(self, sessions: list[LoopSession]) -> list[Outcome]:
        """How every choice's loop ended, run concurrently; the first failure ends them all."""
        if len(sessions) == 1:
            return [await self.run(sessions[0])]
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(self.run(session)) for session in sessions]
        except BaseExceptionGroup as failed:
            raise _first_error(failed) from None
        return [task.result() for task in tasks]

    async def run(self, session: LoopSession) -> Outcome:
        """The non-streaming driver: runs the work, keeps the last event."""
        try:
            last: Outcome | None = None
            async for event in rounds(self.upstream, session, stream=False):
                if isinstance(event, Working):
                    await event.start()
                elif isinstance(event, HandBack | Final):
                    last = event
        except GatewayError as exc:
            session.mark_failure(exc)
            raise
        assert last is not None  # the engine ends every loop with one of them
        return last
