"""Replaying a recorded request against another model (issue 26), through the gateway's
own engine.

The loop starts where the recorded one did (its chat-dialect request: the visible
history, parameters and client tools) and offers the recorded server tools as the
model saw them. The model is the one asked for, on its configured upstream. When the
new model calls a tool with the same name and canonically equal arguments as a call of
the recording, the recorded result is served; any other call is answered with an
error result saying it was not in the recording — or, with ``live_read``, run live if
the gateway's own current policy says its tool only reads (docs/design.md §16).

A recording is input like any other: what it says a tool does (``effects``) decides
nothing. A call runs live only when the gateway knows a tool of that name, the tenant
may use it, its current policy (the tool's method, the operator's and the tenant's
rules) reads it as ``read`` and asks no approval; it is prepared by that tool (its
schema, its ``bind`` values) and sent through the gateway's one guarded transport.
Where a recorded tool's definition differs from the live one's, the report warns.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from gateway.chat_json import encode_tool
from gateway.config import GatewayConfig, LimitsConfig
from gateway.engine.loop import Final, HandBack, LoopEnd, LoopJob, ToolLoop
from gateway.engine.recorded import Ending, RecordedTool, Recording
from gateway.errors import BadRequest, GatewayError
from gateway.policy.guardrails import Guard
from gateway.policy.limits import Narrowing
from gateway.policy.point import PolicyPoint
from gateway.policy.rules import TenantPolicy
from gateway.policy.tenants import Tenant
from gateway.runtime.snapshot import Runtime
from gateway.runtime.tool_sources import static_tools
from gateway.upstream.port import ModelAsk
from gateway.upstream.servers import ModelServers
from gateway.upstream.wire import Wire
from gateway.values import AnsweredRound, UsageCounts
from tool_registry import (
    CallContext,
    Effects,
    GuardedTransport,
    HttpRunner,
    Outcome,
    PreparedCall,
    Tool,
    ToolArgumentsInvalid,
    ToolConfigError,
    ToolExecutor,
    ToolRegistry,
    ToolResult,
    canonical,
    definition_fingerprint,
    dumps_text,
    error_result,
    immutable,
)

Served = str  # "recorded" | "live" | "not_recorded" | "write_refused"
LiveRefusal = Literal["unknown", "not_allowed", "write", "approval"]
NOT_RECORDED = (
    "This call was not in the recording being replayed, so it was not made. Answer with "
    "what you have."
)
WRITE_REFUSED = (
    "This call was not in the recording being replayed, and its tool changes things: "
    "a replay never runs it. Answer with what you have."
)


def call_key(name: str, arguments: Any) -> str:
    """Identifies a call across a recording and its replay: the name and the
    canonical JSON of the arguments (an object), or of the text when it is not one."""
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):
            arguments = json.loads(arguments)
    return f"{name}:{canonical(arguments)}"


@immutable
class ServedCall:
    """A tool call of the replay (its tool and arguments) and what served it."""

    name: str
    arguments: Any  # as the model wrote them (JSON)
    served: Served


@dataclass(slots=True)
class ServedCalls:
    """What the replay's tool calls were served from, in order (a replay's own list:
    the run's ledger is ``policy.ledger``'s)."""

    calls: list[ServedCall] = field(default_factory=list)

    def add(self, name: str, arguments: Any, served: Served) -> None:
        self.calls.append(ServedCall(name, arguments, served))


@immutable
class LiveJudgement:
    """What the gateway's current policy says of a recorded tool's name: its own tool
    of that name (if it knows one), what that tool does, and whether a replay may run
    it live (``refused`` says why not)."""

    tool: Tool | None
    effects: Effects
    refused: LiveRefusal | None


def judge_live(runtime: Runtime, tenant: Tenant | None, name: str) -> LiveJudgement:
    """Whether a replay may call the tool ``name`` live, decided by the gateway alone."""
    tool = runtime.registry.get(name)
    if tool is None:
        return LiveJudgement(None, "write", "unknown")
    rules = (
        tenant.policy if tenant is not None else TenantPolicy.resolve(runtime.config.policy, None)
    )
    said = rules.of(tool)
    if tenant is not None and name not in tenant.tools:
        return LiveJudgement(tool, said.effects, "not_allowed")
    if said.effects != "read":
        return LiveJudgement(tool, said.effects, "write")
    if said.approval != "never":
        return LiveJudgement(tool, said.effects, "approval")
    return LiveJudgement(tool, said.effects, None)


class ReplayTool(Tool):
    """A recorded tool: its definition as the model saw it, its recorded results, and
    the gateway's judgement of its live namesake."""

    __slots__ = ("_context", "_effects", "_live", "_results", "_served", "_writes")

    def __init__(
        self,
        recorded: RecordedTool,
        results: dict[str, ToolResult],
        served: ServedCalls,
        judged: LiveJudgement,
        live_read: bool,
        context: CallContext,
    ) -> None:
        definition = recorded.definition
        super().__init__(
            definition.name,
            definition.description or "",
            dict(definition.parameters or {"type": "object"}),
            source="replay",
            origin=f"recording: tool {definition.name!r}",
            label=recorded.source,
        )
        self._effects: Effects = judged.effects
        self._writes = judged.refused == "write"  # the gateway's word, not the recording's
        self._results = results
        self._served = served
        self._live = judged.tool if live_read and judged.refused is None else None
        self._context = context

    @property
    def effects(self) -> Effects:
        return self._effects

    async def run(self, call: PreparedCall, deadline: float | None, http: HttpRunner) -> ToolResult:
        found = self._results.get(call_key(self.name, call.arguments))
        if found is not None:
            self._served.add(self.name, call.arguments, "recorded")
            return found
        if self._live is not None:
            self._served.add(self.name, call.arguments, "live")
            try:  # the live tool's own schema and bound values, not the recording's
                live = self._live.prepare(dumps_text(call.arguments), self._context)
            except ToolArgumentsInvalid as exc:
                return error_result(str(exc), "invalid_args")
            return await self._live.run(live, deadline, http)
        refused = "write_refused" if self._writes else "not_recorded"
        self._served.add(self.name, call.arguments, refused)
        message = WRITE_REFUSED if self._writes else NOT_RECORDED
        return error_result(message, "denied")


def recorded_results(recording: Recording) -> dict[str, dict[str, ToolResult]]:
    """Per tool, the results of its recorded calls by ``call_key`` of the arguments the
    model wrote (header-bound values never take part: the model never writes them)."""
    written = {call.id: call for call in recording.calls() if call.id}
    results: dict[str, dict[str, ToolResult]] = {}
    for entry in recording.tool_calls:
        call = written.get(entry.id) if entry.id is not None else None
        if call is None or entry.name is None or entry.result is None:
            continue
        known: Outcome = next((o for o in get_args(Outcome) if o == entry.outcome), "ok")
        result = ToolResult(entry.result, known)
        results.setdefault(entry.name, {})[call_key(entry.name, call.arguments)] = result
    return results


@dataclass(slots=True)
class Replayed:
    """How the replay went."""

    model: str
    rounds: list[AnsweredRound]
    tool_calls: list[ServedCall]
    ended: Ending | None
    usage: UsageCounts
    error: str | None = None
    warnings: list[str] = field(default_factory=list)


class Replayer:
    """Replays recordings with a gateway's snapshot: its models and upstreams, its tools
    and policy (what may run live), and its one guarded transport for live reads."""

    def __init__(
        self,
        runtime: Runtime,
        upstream: Wire,
        tool_transport: GuardedTransport,
        guard: Guard | None = None,
    ) -> None:
        self._runtime = runtime
        self._models = ModelServers(upstream)
        self._executor = ToolExecutor(tool_transport)
        if guard is None:  # the CLI's: its judges ask through the same port and guard
            guard = Guard(
                models=self._models, routes=runtime.models.route, transport=tool_transport
            )
        self._guard = guard

    @classmethod
    def of_config(
        cls,
        config: GatewayConfig,
        upstream: Wire,
        tool_transport: GuardedTransport,
    ) -> Replayer:
        """A replayer for a configuration read from its file (the CLI): its inline,
        file and local OpenAPI tools are what may run live."""
        runtime = Runtime.build(config, static_tools(config).tools)
        return cls(runtime, upstream, tool_transport)

    async def replay(
        self,
        recording: Recording,
        model: str,
        tenant: str | None = None,
        live_read: bool = False,
    ) -> Replayed:
        loop_start = recording.loop
        if loop_start is None:
            raise BadRequest("The recording cannot be replayed: it holds no loop to replay.")
        runtime = self._runtime
        owner = runtime.tenants.by_id(tenant) if tenant is not None else None
        route = runtime.models.route(model)
        served = ServedCalls()
        results = recorded_results(recording)
        context = CallContext(owner.id if owner is not None else "replay", {})
        tools, warnings = [], []
        for recorded in recording.tools:
            name = recorded.definition.name
            judged = judge_live(runtime, owner, name)
            live = judged.tool
            if live is not None and recorded.fingerprint != definition_fingerprint(
                encode_tool(live.definition)
            ):
                warnings.append(
                    f"tool {name[:64]!r}: the recorded definition differs from the gateway's"
                )
            tool = ReplayTool(recorded, results.get(name, {}), served, judged, live_read, context)
            tools.append(tool)
        try:
            registry = ToolRegistry(tools)
        except ToolConfigError as exc:  # a recording's schema the registry refuses
            raise BadRequest(f"The recording's tools cannot be used: {exc}") from exc
        client_tools = loop_start.client_tools
        client_names = frozenset(tool.name for tool in client_tools if tool.name)
        limits = owner.limits if owner is not None else LimitsConfig()
        # A recorded result enters the replay as a fresh one would: screened by the
        # guardrails of the tenant (or the gateway) about its tool (docs/guardrails.md).
        # The recording's other rules are not the gateway's: none but these apply.
        rules = (
            owner.policy if owner is not None else TenantPolicy.resolve(runtime.config.policy, None)
        )
        policy, _ = PolicyPoint.of_request(
            tuple(registry.names),
            limits,
            Narrowing(),
            client_names,
            registry,
            rules=TenantPolicy(guarding=rules.guarding),
            guard=self._guard,
        )
        chat = self._models.open(
            ModelAsk(
                upstream=route.upstream,
                model=route.model.target,
                params=loop_start.params,
                history=loop_start.history,
                server_tools=registry.definitions(policy.server_tools),
                client_tools=client_tools,
                client_names=client_names,
            )
        )
        loop = ToolLoop(self._executor)
        (run,) = loop.runs(LoopJob(chat, policy, context, record=True))
        error = None
        outcome: LoopEnd | None = None
        try:
            outcome = await loop.run(run)
        except GatewayError as exc:
            error = exc.message
        return Replayed(
            model=model,
            rounds=run.ledger.answers,
            tool_calls=served.calls,
            ended=_ending(outcome),
            usage=run.state.usage.totals,
            error=error,
            warnings=warnings,
        )


def _ending(outcome: LoopEnd | None) -> Ending | None:
    if isinstance(outcome, Final):
        turn = outcome.answer.turn
        return Ending("final", turn.content, turn.refusal, outcome.finish_reason)
    if isinstance(outcome, HandBack):
        return Ending("hand_back", calls=outcome.calls)
    return None
