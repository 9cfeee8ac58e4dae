"""One request skeleton for every model surface (DESIGN.md §10).

``Skeleton.__call__`` is the head and tail every model request shares, written once:
admit → read → parse → resolve the model → the policy point (tools in play, shadowed
names) → pass through, or restore and keep → the loop job → run or stream → headers
and metering. A surface supplies only its own parts (``Surface``): how to parse its
body, and, for one request (``SurfaceCall``), what the loop starts from and what is
kept around it, how the answer is rendered, and how the event stream is written.

``Admission`` is how every route learns who is asking: the API key's tenant, the
caller's identity within it, and the rate limits' verdict.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from gateway.engine.loop import LoopJob, Resumed, Run
from gateway.engine.recorded import LoopStart
from gateway.engine.report import RunReport
from gateway.ops.offload import offload
from gateway.policy.background import is_background
from gateway.policy.budgets import Budgets
from gateway.policy.idempotency import write_scope
from gateway.policy.identity import caller_identity
from gateway.policy.limits import Narrowing
from gateway.policy.models import ModelRoute
from gateway.policy.point import PolicyPoint
from gateway.policy.prices import Rates, read_usage
from gateway.policy.run_budget import COST_HEADER, money
from gateway.policy.tenants import Tenant
from gateway.runtime.snapshot import Runtime
from gateway.store.kept_writes import RequestWrites
from gateway.store.turns import TurnStore
from gateway.surfaces.approval_answers import Approvals, held_calls, take_answers
from gateway.surfaces.event_stream import start_event_stream
from gateway.surfaces.forward import Meter, forward_json
from gateway.surfaces.history import put_back_into, seen_all
from gateway.surfaces.http import Exchange, read_body
from gateway.surfaces.request_end import RequestEnd
from gateway.surfaces.streaming import EventWriter, event_stream
from gateway.upstream.chat_model import ChatModel
from gateway.values import KeepTurn, Message, ToolDefinition
from tool_registry import CallContext

if TYPE_CHECKING:
    from gateway.runtime.services import Gateway

SHADOWED_HEADER = "x-toolgate-shadowed-tools"
BACKGROUND_HEADER = "x-toolgate-background"  # a front-end's background task: no server tools


class Admission:
    """Who is asking, and whether the rate limits let them."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    def tenant(self, request: Request, exchange: Exchange) -> tuple[Runtime, Tenant]:
        """The runtime snapshot this request uses to its end, and the tenant its key
        names (401 for none)."""
        runtime = self._gateway.runtime
        tenant = runtime.tenants.authenticate(request.headers.get("authorization"))
        exchange.tenant = tenant.id
        return runtime, tenant

    async def __call__(
        self, request: Request, exchange: Exchange
    ) -> tuple[Runtime, Tenant, Meter | None]:
        """``tenant``, the caller's identity within it (a second value of a bound
        header is a 400), then the rate limits: their headers go on whatever the
        answer is; a tenant with a token limit has its usage charged (the meter)."""
        runtime, tenant = self.tenant(request, exchange)
        exchange.identity = caller_identity(
            tenant.id, request.headers, runtime.registry.bound_headers
        )
        limiter = self._gateway.limiter
        admission = await limiter.admit(tenant)
        exchange.headers |= admission.headers
        if not admission.metered:
            return runtime, tenant, None

        async def meter(usage: Any) -> None:
            await limiter.charge(tenant, usage)

        return runtime, tenant, meter


class Asked(Protocol):
    """What every surface's parsed request says."""

    @property
    def body(self) -> Mapping[str, Any]: ...  # as the client sent it, less ``toolgate``

    @property
    def model(self) -> str: ...

    @property
    def stream(self) -> bool: ...

    @property
    def narrowing(self) -> Narrowing: ...

    @property
    def client_tool_names(self) -> frozenset[str]: ...

    @property
    def client_approves(self) -> bool: ...  # held calls are handed to the client

    def user_text(self) -> str: ...  # the last user message's text


@dataclass(slots=True)
class Head:
    """A model request admitted, read and parsed, with its policy."""

    request: Request
    exchange: Exchange
    runtime: Runtime
    tenant: Tenant
    meter: Meter | None
    route: ModelRoute
    policy: PolicyPoint

    turns: TurnStore
    large: bool = False  # a large body: work that grows with it is done off the event loop
    writes: RequestWrites | None = None  # where its write results are kept for its retries
    taint: str | None = None  # where the request's input first held untrusted words

    def __post_init__(self) -> None:
        self.taint = self.policy.input_taint

    def tainted(self, source: str | None) -> None:
        """The request's input holds untrusted words from ``source`` (a restored turn,
        a stored response, a conversation): its run starts tainted."""
        if self.taint is None:
            self.taint = source

    def keeper(self, visible: Sequence[Message]) -> KeepTurn | None:
        """How a turn handed back in this request is kept: bound to what the client
        sent (``visible``). None when nothing can be handed back."""
        policy = self.policy
        client_approves = policy.desk is not None and policy.desk.approver == "client"
        if not (policy.server_tools and (policy.client_tools or client_approves)):
            return None
        history = partial(seen_all, list(visible))  # as it is now, whatever the loop does
        return self.turns.keeper(self.tenant.id, history, self.exchange.identity)

    async def restore(self, visible: Sequence[Message]) -> list[Message] | None:
        """A client returning with tool results may be answering a mixed turn: the
        history with the server side of it put back (from whichever replica saved it,
        for the same caller), or None. The run is tainted if that turn's was."""
        if not any(m.role == "tool" for m in visible):
            return None
        history = seen_all(visible)
        restored = await self.turns.restore(self.tenant.id, history, self.exchange.identity)
        if restored is None:
            return None
        self.tainted(restored.taint)
        return put_back_into(visible, restored)

    async def answered(
        self, visible: list[Message], asked: Approvals
    ) -> tuple[list[Message], Resumed | None]:
        """The client's answers to the approvals of ``asked``, taken out of the history;
        the held calls they answer are decided now (``PolicyPoint.resume``) and run
        before the first round."""
        if not asked:
            return visible, None
        kept, answers = take_answers(visible, asked)
        if not answers:
            return kept, None
        held = tuple(c for c in held_calls(kept) if c.name in self.policy.server_tools)
        decided = await self.policy.resume(answers, held)
        return kept, Resumed(held, decided) if held else None


@dataclass(frozen=True, slots=True)
class Forward:
    """Pass the request through to the upstream: as it came, or (``changed``) as
    ``body`` (the request's own body when None) says."""

    changed: bool
    body: Mapping[str, Any] | None = None


@dataclass(slots=True)
class Plan:
    """What the loop starts from: the client's parameters (in the upstream dialect; a
    ``messages`` among them is not read), the visible history, the client's own tools
    in that dialect, how a hand-back is kept, and how many choices run."""

    params: Mapping[str, Any]
    history: Sequence[Message]
    client_tools: Sequence[ToolDefinition]
    keep: KeepTurn | None = None
    single_call_id: str | None = None
    n: int = 1
    usage: list[Any] = field(default_factory=list)  # spent before the loop (a summary)
    resumed: Resumed | None = None  # held calls the client has answered, run first


class SurfaceCall(Protocol):
    """One request on one surface, after its head."""

    async def prepare(self) -> Plan | Forward: ...

    async def render(self, report: RunReport) -> bytes: ...  # the answer

    def writers(self, n: int) -> Sequence[EventWriter]: ...  # a stream's, one per choice

    def closing(self, report: RunReport) -> list[bytes]: ...  # a stream's last events

    async def ended(self, report: RunReport) -> None: ...  # however the run ended


A = TypeVar("A", bound=Asked)


class Surface(Protocol[A]):
    """An API a client speaks over the engine."""

    forward_path: str  # under the upstream's base URL, for pass-through

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
        plan = await call.prepare()
        if isinstance(plan, Forward):
            return await self._forward(head, asked, raw, plan)
        runs = await self._runs(head, plan)
        end = RequestEnd(runs, exchange, call.ended, head.meter)
        if asked.stream:
            writers = call.writers(len(runs))
            events = event_stream(self._gateway.loop, runs, writers, end, call.closing)
            return await start_event_stream(events, partial(first_byte, exchange))
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
        )
        writes = None
        if policy.server_tools:
            # Its writes are kept for its retries (DESIGN.md §16); a key reused with
            # another body is refused before anything (an approval) is used up.
            writes = await self._writes(request, exchange, runtime, raw)
        if shadowed:  # the client's own tools of these names win for this request
            exchange.headers[SHADOWED_HEADER] = ",".join(shadowed)
        head = Head(
            request, exchange, runtime, tenant, meter, route, policy, gateway.turns, large, writes
        )
        return asked, head, raw

    async def _forward(self, head: Head, asked: A, raw: bytes, plan: Forward) -> Response:
        """Pass the request through to its upstream, metered."""
        gateway, exchange = self._gateway, head.exchange
        meter, on_usage = await pass_through_meter(
            gateway.budgets, exchange, head.tenant, head.route, head.meter
        )
        return await forward_json(
            gateway.upstream,
            head.route,
            self.surface.forward_path,
            raw,
            plan.body if plan.body is not None else asked.body,
            plan.changed,
            asked.model,
            stream=asked.stream,
            meter=meter,
            on_usage=on_usage,
            trace=exchange.span.headers if exchange.span is not None else None,
        )

    async def _runs(self, head: Head, plan: Plan) -> list[Run]:
        """The request's loops, one per choice, from its plan."""
        gateway, exchange, policy, route = self._gateway, head.exchange, head.policy, head.route
        if exchange.record != "off":  # where a replay starts its loop (issue 26)
            params = {k: v for k, v in plan.params.items() if k != "messages"}
            exchange.loop_start = LoopStart(params, tuple(plan.history), tuple(plan.client_tools))
        budget = gateway.budgets.run(head.tenant, route, policy.limits)
        registry = head.runtime.registry
        model = ChatModel(
            gateway.upstream,
            route.upstream,
            plan.params,
            plan.history,
            route.model.target,
            [*registry.definitions(policy.server_tools), *plan.client_tools],
            policy.client_tools,
        )
        if head.large:  # the history is encoded once, and measured for a budget
            await offload(True, model.prompt_bytes if budget is not None else model.prepare)
        job = LoopJob(
            model,
            policy,
            CallContext(head.tenant.id, head.request.headers),
            plan.keep,
            plan.single_call_id,
            resumed=plan.resumed,
            trace=exchange.span,
            record=exchange.record != "off",
            writes=head.writes,
            budget=budget,
            taint=head.taint,
            spent=tuple(plan.usage),
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
) -> tuple[Meter | None, Callable[[Any], None]]:
    """For a request passed through: what is charged once its usage is known (its
    tenant's rate limits, and its budget windows when it has a budget or the model a
    price), and what reads that usage (the cost goes in a header when it is
    known before the answer is sent). A tenant whose budget is spent is refused here
    (429 ``insufficient_quota``)."""
    rates = Rates.of(route.model.price)

    def on_usage(usage: Any) -> None:
        exchange.usage = usage
        counts = read_usage(usage) if rates else None
        if counts is not None:
            exchange.cost_nanos = counts.nanos(rates)
            exchange.headers[COST_HEADER] = money(exchange.cost_nanos)

    if tenant.budget is None and not rates:
        return rate_meter, on_usage  # nothing to count
    windows = await budgets.admit(tenant)

    async def meter(usage: Any) -> None:
        if rate_meter is not None:
            await rate_meter(usage)
        await budgets.charge(tenant, route, windows, usage)

    return meter, on_usage
