"""The server-side tool loop (non-streaming): ask, run tools, ask again (DESIGN.md §5)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from tool_registry import CallContext, ToolExecutor, ToolRegistry

from .caps import CapKind, LoopState, add_usage, check_caps, last_round_due
from .config import UpstreamConfig
from .errors import GatewayError, RequestTimeout, ToolLimitExceeded
from .messages import assistant_turn, finalize, first_message, keep_calls, tool_calls_of
from .partition import partition_calls
from .policy import LoopLimits
from .tool_runner import CallRecord, ToolRunner
from .upstream import UpstreamClient

_CAP_MESSAGES: dict[CapKind, str] = {
    "iterations": "The model still asked for tools after max_iterations ({n}) rounds.",
    "tool_calls": "The model asked for more than max_tool_calls ({n}) tool calls.",
    "time": "The tools did not finish within request_timeout_s ({n}s).",
}


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


@dataclass(slots=True)
class LoopResult:
    response: dict[str, Any]
    state: LoopState
    calls: list[CallRecord] = field(default_factory=list)


def cap_error(kind: CapKind, limits: LoopLimits) -> ToolLimitExceeded:
    n: float = {
        "iterations": limits.max_iterations,
        "tool_calls": limits.max_tool_calls,
        "time": limits.request_timeout_s,
    }[kind]
    return ToolLimitExceeded(_CAP_MESSAGES[kind].format(n=f"{n:g}"))


def round_body(
    job: LoopJob,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    first: bool,
    final: bool,
) -> dict[str, Any]:
    """The request of one round: the client's parameters, the history so far, the tools.

    A ``tool_choice`` that forces a tool applies to the first round only; the forced
    last round uses ``"none"``.
    """
    body = dict(job.body)
    body["model"] = job.upstream_model
    body["messages"] = messages
    body["tools"] = tools
    body["stream"] = False
    body.pop("stream_options", None)
    if final:
        body["tool_choice"] = "none"
    elif not first and body.get("tool_choice") not in (None, "auto", "none"):
        body["tool_choice"] = "auto"
    return body


class ToolLoop:
    """Runs requests that have server tools in play."""

    def __init__(
        self, upstream: UpstreamClient, executor: ToolExecutor, registry: ToolRegistry
    ) -> None:
        self._upstream = upstream
        self._executor = executor
        self._registry = registry

    def tool_definitions(self, job: LoopJob) -> list[dict[str, Any]]:
        server = []
        for name in job.server_tools:
            tool = self._registry.get(name)
            if tool is not None:
                server.append(tool.definition)
        return [*server, *job.client_tools]

    async def run(self, job: LoopJob) -> LoopResult:
        state = LoopState()
        runner = ToolRunner(
            self._registry,
            self._executor,
            job.context,
            frozenset(job.server_tools),
            [*job.server_tools, *sorted(job.client_tool_names)],
            job.limits.max_parallel_tools,
            state,
        )
        try:
            response = await self._loop(job, state, runner)
        except GatewayError as exc:
            if state.side_effects:
                exc.headers["x-should-retry"] = "false"
            raise
        return LoopResult(response, state, runner.records)

    async def _loop(self, job: LoopJob, state: LoopState, runner: ToolRunner) -> dict[str, Any]:
        clock = asyncio.get_running_loop()
        deadline = clock.time() + job.limits.request_timeout_s
        tools = self.tool_definitions(job)
        messages = list(job.body["messages"])
        while True:
            final = last_round_due(state, job.limits)
            body = round_body(job, messages, tools, state.iterations == 0, final)
            response = await self._ask(job, body, None if state.forced_final else deadline)
            state.iterations += 1
            add_usage(state.usage, response.get("usage"))
            message = first_message(response)
            calls = tool_calls_of(message)
            if not calls or final:
                if calls:
                    keep_calls(response, [])  # the forced last round may not call tools
                return finalize(response, job.client_model, state.usage)
            part = partition_calls(calls, frozenset(job.server_tools), job.client_tool_names)
            if part.client:
                keep_calls(response, part.client)
                return finalize(response, job.client_model, state.usage)

            runnable = len(part.server)
            cap = check_caps(state, job.limits, runnable, deadline - clock.time())
            if cap is not None:
                if job.limits.on_limit == "error":
                    raise cap_error(cap.kind, job.limits)
                runnable = cap.runnable
                state.forced_final = True
            results, timed_out = await runner.run(calls, runnable, deadline)
            if timed_out:
                if job.limits.on_limit == "error":
                    raise cap_error("time", job.limits)
                state.forced_final = True
            messages.append(assistant_turn(message))
            messages.extend(results)

    async def _ask(
        self, job: LoopJob, body: dict[str, Any], deadline: float | None
    ) -> dict[str, Any]:
        if deadline is None:
            return await self._upstream.chat(job.upstream, body)
        try:
            async with asyncio.timeout_at(deadline):
                return await self._upstream.chat(job.upstream, body)
        except TimeoutError as exc:
            raise RequestTimeout(
                f"The request took longer than request_timeout_s "
                f"({job.limits.request_timeout_s:g}s)."
            ) from exc
