"""The server-side tool loop: ask, run tools, ask again (DESIGN.md §5).

``LoopSession`` holds one request's state and the steps of a round; the engine
(``engine.rounds``) is the one round skeleton; ``ToolLoop.run`` drives it without
streaming, ``stream_loop`` with.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from tool_registry import CallContext, ToolExecutor, ToolRegistry

from .caps import LoopState, Step, add_usage, cap_error, decide, last_round_due
from .config import UpstreamConfig
from .engine import Final, HandBack, Working, rounds
from .errors import GatewayError, RequestTimeout
from .messages import assistant_turn, finalize, keep_calls, tool_calls_of
from .metrics import Metrics
from .partition import call_name
from .policy import LoopLimits
from .result_cache import ResultCache
from .tool_runner import ToolRunner
from .turns import TurnStore
from .upstream import UpstreamClient

T = TypeVar("T")

_TOOLSETS_KEPT = 1024  # distinct tool sets (tenants by narrowings) remembered


@dataclass(frozen=True, slots=True)
class LoopJob:
    """Everything one request's loop needs."""

    upstream: UpstreamConfig
    body: dict[str, Any]  # the client's body, ``toolgate`` removed
    client_model: str
    upstream_model: str
    server_tools: tuple[str, ...]
    client_tools: list[dict[str, Any]]
    client_tool_names: frozenset[str]
    limits: LoopLimits
    context: CallContext
    conversation: str = ""  # what a handed-back turn is bound to (``TurnStore``)
    legacy_call_id: str | None = None  # the legacy ``functions`` shape: its call's id
    choice: int = 0  # which of the request's ``n`` choices this loop answers


def round_body(
    job: LoopJob,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    first: bool,
    final: bool,
    stream: bool,
) -> dict[str, Any]:
    """The request of one round: the client's parameters, the history so far, the tools.

    ``tool_choice`` after the first round: see ``later_tool_choice``; the forced last
    round uses ``"none"``. Streamed rounds always ask for usage, to sum it.
    """
    body = dict(job.body)
    body["model"] = job.upstream_model
    body["messages"] = messages
    body["tools"] = tools
    body["stream"] = stream
    if stream:
        body["stream_options"] = {"include_usage": True}
    else:
        body.pop("stream_options", None)
    if final:
        body["tool_choice"] = "none"
    elif not first and "tool_choice" in body:
        body["tool_choice"] = later_tool_choice(body["tool_choice"], job.client_tool_names)
    return body


def later_tool_choice(choice: Any, client_tools: frozenset[str]) -> Any:
    """The client's ``tool_choice`` for the rounds after the first (DESIGN.md §6).

    ``"required"``, or a named client tool, stays while the client has tools of its
    own: the answer it sees must be the tool call it demanded, so hidden rounds go on
    until the model makes it. Forcing a server tool, or ``"required"`` with server
    tools only, was met by the first round: later rounds are ``"auto"``.
    """
    if choice in (None, "auto", "none"):
        return choice
    if choice == "required":
        return choice if client_tools else "auto"
    if isinstance(choice, dict):
        kind = choice.get("type")
        named = choice.get(kind) if isinstance(kind, str) else None
        if isinstance(named, dict) and named.get("name") in client_tools:
            return choice
    return "auto"


@dataclass(frozen=True, slots=True)
class ToolSet:
    """The server tools in play, worked out once per distinct set (per tenant, mostly)."""

    server: frozenset[str]
    names: list[str]
    definitions: list[dict[str, Any]]

    @classmethod
    def of(cls, names: tuple[str, ...], registry: ToolRegistry) -> ToolSet:
        definitions = [t.definition for n in names if (t := registry.get(n)) is not None]
        return cls(frozenset(names), list(names), definitions)


class LoopSession:
    """One request going round the loop."""

    def __init__(
        self,
        job: LoopJob,
        registry: ToolRegistry,
        executor: ToolExecutor,
        toolset: ToolSet,
        turns: TurnStore | None = None,
        cache: ResultCache | None = None,
        metrics: Metrics | None = None,
        state: LoopState | None = None,
    ) -> None:
        self.job = job
        self._turns = turns
        self._round_started = time.perf_counter()
        self._round: dict[str, Any] = {}  # this session's last round, in the trace
        self._rounds_made = 0
        self._iteration = 0
        self.error: GatewayError | None = None
        # The choices of one request (``n``) share one state: the caps, the usage and
        # the trace are the request's.
        self.state = state if state is not None else LoopState()
        available = toolset.names
        if job.client_tool_names:
            available = [*available, *sorted(job.client_tool_names)]
        self.runner = ToolRunner(
            registry,
            executor,
            job.context,
            toolset.server,
            available,
            job.limits.max_parallel_tools,
            self.state,
            cache,
            metrics,
        )
        self._clock = asyncio.get_running_loop()
        self._deadline = self._clock.time() + job.limits.request_timeout_s
        self._tools = [*toolset.definitions, *job.client_tools]
        self._messages: list[dict[str, Any]] = list(job.body["messages"])
        self._visible = len(self._messages)  # what the client sent; the rest is hidden
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
        """The body of the next round, counted from now: the choices of a request run
        at once, and none may start a round the request's caps do not allow."""
        self._round_started = time.perf_counter()
        self._final = last_round_due(self.state, self.job.limits)
        self.state.iterations += 1
        self._iteration = self.state.iterations
        first = self._rounds_made == 0
        return round_body(self.job, self._messages, self._tools, first, self._final, stream)

    def timeout_error(self) -> RequestTimeout:
        return RequestTimeout(
            "The request took longer than request_timeout_s "
            f"({self.job.limits.request_timeout_s:g}s)."
        )

    def count_round(self, usage: Any) -> None:
        self._rounds_made += 1
        add_usage(self.state.usage, usage)
        duration_ms = round((time.perf_counter() - self._round_started) * 1000, 3)
        self._round = {
            "iteration": self._iteration,
            "upstream": self.job.upstream.name,
            "duration_ms": duration_ms,
            "usage": usage if isinstance(usage, dict) else None,
            "forced_final": self._final,
        }
        if self.job.choice:
            self._round["choice"] = self.job.choice
        self.state.rounds.append(self._round)

    def decide(self, calls: list[dict[str, Any]]) -> Step:
        if self._round:
            self._round["tool_calls"] = [call_name(call) for call in calls]
        step = decide(
            self.state,
            self.job.limits,
            calls,
            self.runner.server_tools,
            self.job.client_tool_names,
            self._final,
            self._deadline - self._clock.time(),
        )
        # Held until the runner starts them: another choice deciding meanwhile sees
        # the budget this one has taken.
        self.state.reserved += step.runnable
        return step

    async def run_tools(self, message: dict[str, Any], runnable: int) -> None:
        """Run the message's calls and add the turn and its results to the history."""
        results, timed_out = await self.runner.run(tool_calls_of(message), runnable, self._deadline)
        if timed_out:
            self.state.caps.append("time")
            if self.job.limits.on_limit == "error":
                raise cap_error("time", self.job.limits)
            self.state.forced_final = True
        self._messages.append(assistant_turn(message))
        self._messages.extend(results)

    def handed(self, message: dict[str, Any], step: Step) -> list[dict[str, Any]]:
        """The client calls to hand back. In the legacy ``functions`` shape a message
        holds one call: the first is kept, under the id the client's return will be
        given (``legacy.call_id``), and the others leave the message."""
        if self.job.legacy_call_id is None:
            return step.calls
        kept, dropped = step.calls[0], {id(call) for call in step.calls[1:]}
        kept["id"] = self.job.legacy_call_id
        if dropped:
            message["tool_calls"] = [c for c in tool_calls_of(message) if id(c) not in dropped]
        return [kept]

    async def hand_back(
        self, message: dict[str, Any], step: Step, handed: list[dict[str, Any]]
    ) -> None:
        """Before handing client calls back: run the server calls of the same message,
        and save every hidden turn of the request — earlier rounds and this one — to be
        put back when the client returns (``TurnStore``, DESIGN.md §6)."""
        results: list[dict[str, Any]] = []
        if step.hidden:
            results, _ = await self.runner.run(step.hidden, step.runnable, self._deadline)
        before = self._messages[self._visible :]
        if self._turns is None or not (step.hidden or before):
            return
        client_ids = [str(call.get("id")) for call in handed]
        tenant = self.job.context.tenant_id
        turn = assistant_turn(message)
        await self._turns.save(tenant, self.job.conversation, before, turn, results, client_ids)

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


class ToolLoop:
    """Runs requests that have server tools in play."""

    def __init__(
        self,
        upstream: UpstreamClient,
        executor: ToolExecutor,
        registry: ToolRegistry,
        keepalive_s: float = 10.0,
        turns: TurnStore | None = None,
        cache: ResultCache | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.upstream = upstream
        self._turns = turns
        self._cache = cache
        self._metrics = metrics
        self.keepalive_s = keepalive_s
        self._executor = executor
        self._registry = registry
        self._toolsets: dict[tuple[str, ...], ToolSet] = {}

    def session(self, job: LoopJob, state: LoopState | None = None) -> LoopSession:
        toolset = self._toolsets.get(job.server_tools)
        if toolset is None:
            if len(self._toolsets) >= _TOOLSETS_KEPT:
                self._toolsets.clear()
            toolset = self._toolsets[job.server_tools] = ToolSet.of(
                job.server_tools, self._registry
            )
        return LoopSession(
            job,
            self._registry,
            self._executor,
            toolset,
            self._turns,
            self._cache,
            self._metrics,
            state,
        )

    def sessions(self, job: LoopJob, n: int) -> list[LoopSession]:
        """One session per choice of the request, sharing its state and caps."""
        first = self.session(job)
        rest = [self.session(replace(job, choice=i), first.state) for i in range(1, n)]
        return [first, *rest]

    async def run_all(self, sessions: list[LoopSession]) -> dict[str, Any]:
        """The completion of every choice, run concurrently: one completion whose
        choices are each loop's answer in order, usage summed over every round."""
        if len(sessions) == 1:
            return await self.run(sessions[0])
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(self.run(session)) for session in sessions]
        except BaseExceptionGroup as failed:
            raise _first_error(failed) from None
        completions = [task.result() for task in tasks]
        merged = completions[0]
        merged["choices"] = [
            {**completion["choices"][0], "index": index}
            for index, completion in enumerate(completions)
        ]
        merged["usage"] = sessions[0].state.usage
        return merged

    async def run(self, session: LoopSession) -> dict[str, Any]:
        """The final completion; what the loop did is in ``session.state``."""
        try:
            return await self._loop(session)
        except GatewayError as exc:
            session.mark_failure(exc)
            raise

    async def _loop(self, session: LoopSession) -> dict[str, Any]:
        """The non-streaming driver: runs the work, keeps the last event."""
        last: HandBack | Final | None = None
        async for event in rounds(self, session, stream=False):
            if isinstance(event, Working):
                await event.start()
            elif isinstance(event, HandBack | Final):
                last = event
        assert last is not None  # the engine ends every loop with one of them
        response = last.response
        assert response is not None  # a round not streamed has its completion
        if isinstance(last, HandBack):
            keep_calls(response, last.calls)
        elif last.dropped:
            keep_calls(response, [])
        return finalize(response, session.job.client_model, session.state.usage)
