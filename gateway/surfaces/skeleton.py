"""One request skeleton for every model surface (docs/design.md §10).

``Skeleton.__call__`` is the head and tail every model request shares, written once:
admit → read → parse → resolve the model → the policy point (tools in play, shadowed
names) → decode → plan (a saved turn put back, approvals answered, how a hand-back is
kept), or pass through → the loop job → run or stream → headers and metering. A
surface is a codec around it (``Surface``): how to parse its body, and, for one request
(``SurfaceCall``), what the loop starts from, how a long history is fitted, how the
answer is rendered and the event stream encoded, and what it keeps once answered.
The request's head (who asks, its policy) is ``surfaces/head.py``'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from gateway.chat_json import encode_messages
from gateway.engine.loop import LoopJob, Resumed, Run
from gateway.engine.offer import Offer
from gateway.engine.recorded import LoopStart
from gateway.engine.report import RunReport
from gateway.ops.offload import offload
from gateway.policy.background import is_background
from gateway.policy.budgets import Budgets
from gateway.policy.idempotency import write_scope
from gateway.policy.limits import Narrowing
from gateway.policy.models import ModelRoute
from gateway.policy.prices import Rates, read_usage
from gateway.policy.run_budget import COST_HEADER, money
from gateway.policy.tenants import Tenant
from gateway.runtime.snapshot import Runtime
from gateway.store.kept_writes import RequestWrites
from gateway.surfaces.approval_answers import Approvals
from gateway.surfaces.event_stream import start_event_stream
from gateway.surfaces.forward import Meter, forward_json
from gateway.surfaces.head import Admission, Asked, Head
from gateway.surfaces.http import Exchange, read_body
from gateway.surfaces.request_end import Ended, RequestEnd
from gateway.surfaces.streaming import StreamEncoder, event_stream
from gateway.upstream.port import ModelAsk
from gateway.values import KeepTurn, Message, Parameters, ToolDefinition, UsageCounts
from tool_registry import CallContext, immutable

if TYPE_CHECKING:
    from gateway.runtime.services import Gateway

SHADOWED_HEADER = "x-toolgate-shadowed-tools"
OFFERED_HEADER = "x-toolgate-tools-offered"  # server tools the first round offers
BACKGROUND_HEADER = "x-toolgate-background"  # a front-end's background task: no server tools
# A client's hosted (server-side) tool types left out (its tenant's ``hosted_tools: drop``).
DROPPED_HEADER = "x-toolgate-dropped-tools"


@immutable
class Forward:
    """Pass the request through to the upstream: as it came, or (``changed``) as
    ``body`` (the request's own body when None) says."""

    changed: bool
    body: Mapping[str, Any] | None = None


@immutable
class Answered:
    """An answer the surface makes itself, with no model round (Ollama's "load the
    model" request): its bytes and their media type."""

    body: bytes
    media_type: str = "application/json"


@immutable
class Start:
    """A request as its surface decoded it for the loop: the client's parameters, the
    history (a stored conversation's before the client's input), the client's own
    tools, and the approvals its history asks and answers. ``continued``: the history
    continues a stored response or conversation, whose hidden rounds it holds already
    (``taint``: where those first read untrusted words). ``forward``: with no server
    tools in play, this body is passed through, its history as planned (``changed``:
    the request differs from its bytes)."""

    params: Parameters
    history: Sequence[Message]
    client_tools: Sequence[ToolDefinition]
    approvals: Approvals = field(default_factory=dict)
    continued: bool = False
    taint: str | None = None
    forward: Mapping[str, Any] | None = None
    changed: bool = False
    single_call_id: str | None = None
    n: int = 1  # choices, each a loop of its own


@dataclass(slots=True)
class Plan:
    """What the loop starts from: the start's parameters and tools, its history put
    right (saved turns back, approvals out), how a hand-back is kept, what was spent
    before the loop (a summary), and the held calls the client answered, run first."""

    params: Parameters
    history: Sequence[Message]
    client_tools: Sequence[ToolDefinition]
    keep: KeepTurn | None = None
    single_call_id: str | None = None
    n: int = 1
    usage: list[UsageCounts | None] = field(default_factory=list)
    resumed: Resumed | None = None


class SurfaceCall(Protocol):
    """One request on one surface, after its head: a codec around the loop."""

    async def decode(self) -> Start | Forward | Answered: ...  # what the loop starts from

    async def fit(
        self, history: list[Message], usage: list[UsageCounts | None]
    ) -> list[Message]: ...

    async def render(self, report: RunReport) -> bytes: ...  # the answer

    def stream(self, n: int) -> StreamEncoder: ...  # a stream's encoder, for n choices

    @property
    def ended(self) -> Ended | None: ...  # however the run ended (None: nothing to keep)


A = TypeVar("A", bound=Asked)


class Surface(Protocol[A]):
    """An API a client speaks over the engine."""

    forward_path: str  # under the upstream's base URL, for pass-through
    echoes_call_ids: bool  # its clients send a call's id back (Ollama's do not)

    def parse(self, raw: bytes, headers: Mapping[str, str]) -> A: ...

    def adapt(self, asked: A, tenant: Tenant) -> A: ...  # the request as the loop reads it

    def call(self, asked: A, head: Head) -> SurfaceCall: ...


class Skeleton(Generic[A]):
    """The endpoint of a model surface: the shared head and tail around its parts."""

    def __init__(self, gateway: Gateway, admit: Admission, surface: Surface[A]) -> None:
        self._gateway = gateway
        self._admit = admit
        self.surface = surface

    async def __call__(self, request: Request, exchange: Exchange) -> Response:
        asked, head, raw = await self._head(request, exchange)
        call = self.surface.call(asked, head)
        plan = await self._plan(head, call)
        if isinstance(plan, Forward):
            return await self._forward(head, asked, raw, plan)
        if isinstance(plan, Answered):
            return Response(plan.body, media_type=plan.media_type)
        runs = await self._runs(head, plan)
        end = RequestEnd(runs, exchange, call.ended, head.meter)
        if asked.stream:
            encoder = call.stream(len(runs))
            events = event_stream(self._gateway.loop, runs, encoder, end)
            media_type = encoder.framing.media_type
            return await start_event_stream(events, partial(first_byte, exchange), media_type)
        async with end:
            await self._gateway.loop.run_all(runs)
            report = end.finish()
            exchange.headers |= report.headers()
            return Response(await call.render(report), media_type="application/json")

    async def _head(self, request: Request, exchange: Exchange) -> tuple[A, Head, bytes]:
        """Admit the request, read and decode its body, resolve its model, and make
        its policy: the request as its surface reads it, its head, and its bytes."""
        gateway, surface = self._gateway, self.surface
        runtime, tenant, meter = await self._admit(request, exchange)
        server = runtime.config.server
        raw = await read_body(request, exchange, server, gateway.large_bodies)
        large = len(raw) > server.large_body_bytes
        asked = await offload(large, surface.parse, raw, request.headers)
        route = runtime.models.resolve(asked.model, tenant)
        exchange.model = asked.model
        if tenant.record != "off":  # it may be recorded (issue 26)
            exchange.record, exchange.sent = tenant.record, raw
        asked = surface.adapt(asked, tenant)
        policy, shadowed = gateway.request_policy(
            runtime,
            tenant,
            _narrowing(asked, tenant, request, exchange),
            asked.client_tool_names,
            exchange.identity,
            asked.client_approves,
            searched=True,
            request_id=exchange.request_id,
        )
        writes = None
        if policy.server_tools:
            # Its writes are kept for its retries (docs/design.md §16); a key reused with
            # another body is refused before anything (an approval) is used up.
            writes = await self._writes(request, exchange, runtime, raw)
        if shadowed:  # the client's own tools of these names win for this request
            exchange.headers[SHADOWED_HEADER] = ",".join(shadowed)
        head = Head(
            request, exchange, runtime, tenant, meter, route, policy, gateway.turns, large, writes
        )
        return asked, head, raw

    async def _plan(self, head: Head, call: SurfaceCall) -> Plan | Forward | Answered:
        """What the loop starts from: the surface's start with a saved turn put back
        (unless a stored conversation holds its hidden rounds already) and the
        client's answers to approvals taken out and decided, made to fit its model;
        or, with no server tools in play, the request passed through."""
        start = await call.decode()
        if isinstance(start, Forward | Answered):
            return start
        keep = head.keeper(start.history)  # bound to what the client sent
        restored = None if start.continued else await head.restore(start.history)
        head.tainted(start.taint)
        history, resumed = await head.answered(restored or list(start.history), start.approvals)
        screened = False
        if head.policy.screens_client:  # its new words and tools' answers, screened
            history, screened = await head.admitted(history)
        if start.forward is not None and not head.policy.server_tools:
            if restored is None and not start.approvals and not screened:
                return Forward(start.changed)
            # The body stays as it was sent: what is forwarded is a new one.
            messages = await offload(head.large, encode_messages, history)
            return Forward(True, {**start.forward, "messages": messages})
        usage: list[UsageCounts | None] = []
        history = await call.fit(history, usage)
        return Plan(
            start.params,
            history,
            start.client_tools,
            keep,
            start.single_call_id,
            start.n,
            usage,
            resumed,
        )

    async def _forward(self, head: Head, asked: A, raw: bytes, plan: Forward) -> Response:
        """Pass the request through to its upstream, metered."""
        gateway, exchange = self._gateway, head.exchange
        meter, on_usage = await pass_through_meter(
            gateway.budgets, exchange, head.tenant, head.route, head.meter
        )
        return await forward_json(
            client=gateway.model_servers.exchange,
            route=head.route,
            path=self.surface.forward_path,
            raw=raw,
            body=plan.body if plan.body is not None else asked.body,
            changed=plan.changed,
            client_model=asked.model,
            stream=asked.stream,
            meter=meter,
            on_usage=on_usage,
            trace=exchange.span.headers if exchange.span is not None else None,
        )

    async def _runs(self, head: Head, plan: Plan) -> list[Run]:
        """The request's loops, one per choice, from its plan."""
        gateway, exchange, policy, route = self._gateway, head.exchange, head.policy, head.route
        if exchange.record != "off":  # where a replay starts its loop (issue 26)
            history, tools = tuple(plan.history), tuple(plan.client_tools)
            exchange.loop_start = LoopStart(plan.params, history, tools)
        budget = gateway.budgets.run(head.tenant, route, policy.limits)
        registry = head.runtime.registry
        offer = None
        if policy.search is not None:  # a search chooses each round's server tools
            meanings = await gateway.meanings.of_request(
                head.runtime.config, policy.search, plan.history
            )
            offer = await offload(
                head.large or policy.search.heavy,
                Offer.start,
                policy.search,
                plan.history,
                plan.params.tool_choice,
                meanings,
            )
            first = (*registry.definitions(offer.names), *policy.search.definitions)
        else:
            first = registry.definitions(policy.server_tools)
        exchange.headers[OFFERED_HEADER] = str(len(first))
        ask = ModelAsk(
            route.upstream,
            route.model.target,
            plan.params,
            plan.history,
            first,
            plan.client_tools,
            policy.client_tools,
            searched=offer is not None,
            answer_tokens=route.model.max_output_tokens,
            stable_call_ids=not self.surface.echoes_call_ids,
        )
        model = gateway.model_servers.open(ask)
        if head.large:  # the history is encoded once, and measured for a budget
            await offload(True, model.prompt_bytes if budget is not None else model.prepare)
        job = LoopJob(
            model,
            policy,
            CallContext(head.tenant.id, head.request.headers, exchange.user),
            plan.keep,
            plan.single_call_id,
            resumed=plan.resumed,
            trace=exchange.span,
            record=exchange.record != "off",
            writes=head.writes,
            budget=budget,
            taint=head.taint,
            guarded=head.guarded,
            spent=tuple(plan.usage),
            offer=offer,
            credentials=gateway.credentials(
                head.runtime, head.tenant.id, exchange.user, exchange.user_token
            ),
        )
        return gateway.loop.runs(job, plan.n)

    async def _writes(
        self, request: Request, exchange: Exchange, runtime: Runtime, raw: bytes
    ) -> RequestWrites | None:
        """Where the request's write results are kept for its retries, if anywhere."""
        tenant = exchange.tenant
        scope = write_scope(
            request.headers, tenant, exchange.identity, raw, runtime.config.idempotency
        )
        if scope is None:
            return None
        kept = self._gateway.kept_writes
        await kept.bind_body(tenant, scope)
        return kept.of(tenant, scope)


def first_byte(exchange: Exchange) -> None:
    exchange.first_byte = time.perf_counter()


def completion_id(exchange: Exchange) -> str:
    """The id of the completion a request answers with, streamed or not: the gateway's."""
    return f"chatcmpl-{exchange.request_id.removeprefix('req_')}"


def _narrowing(asked: Asked, tenant: Tenant, request: Request, exchange: Exchange) -> Narrowing:
    """What the request narrows to: none of the server tools for a front-end's
    background task (a title, tags, follow-ups) or ``tool_choice: "none"``."""
    background = tenant.background
    if not is_background(
        asked.body.get("tool_choice"), background, asked.user_text, request.headers
    ):
        return asked.narrowing
    exchange.headers[BACKGROUND_HEADER] = "no server tools"
    return replace(asked.narrowing, tools=frozenset())


async def pass_through_meter(
    budgets: Budgets,
    exchange: Exchange,
    tenant: Tenant,
    route: ModelRoute,
    rate_meter: Meter | None,
) -> tuple[Meter | None, Callable[[UsageCounts | None], None]]:
    """For a request passed through: what is charged once its usage is known (its
    tenant's rate limits, and its budget windows when it has a budget or the model a
    price), and what reads that usage (the cost goes in a header when it is
    known before the answer is sent). A tenant whose budget is spent is refused here
    (429 ``insufficient_quota``)."""
    rates = Rates.of(route.model.price)

    def on_usage(usage: UsageCounts | None) -> None:
        exchange.usage = usage
        counts = read_usage(usage) if rates else None
        if counts is not None:
            exchange.cost_nanos = counts.nanos(rates)
            exchange.headers[COST_HEADER] = money(exchange.cost_nanos)

    if tenant.budget is None and not rates:
        return rate_meter, on_usage  # nothing to count
    windows = await budgets.admit(tenant)

    async def meter(usage: UsageCounts | None) -> None:
        if rate_meter is not None:
            await rate_meter(usage)
        await budgets.charge(tenant, route, windows, usage)

    return meter, on_usage
