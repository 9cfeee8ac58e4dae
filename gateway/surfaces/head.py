"""A model request's head (docs/design.md §10, §13): who is asking and whether the rate
limits let them (``Admission``, which every route uses), and the request admitted,
read and parsed, with its policy (``Head``) — which also knows how the request's
history is completed before its loop: a saved turn put back, the client's answers to
approvals taken out and decided, and how a turn handed back in it will be kept."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from starlette.requests import Request

from gateway.config import AssertedUsersConfig
from gateway.engine.loop import Resumed
from gateway.policy.client_input import admitted
from gateway.policy.guardrails import GuardVerdict
from gateway.policy.identity import caller_identity
from gateway.policy.limits import Narrowing
from gateway.policy.models import ModelRoute
from gateway.policy.point import PolicyPoint
from gateway.policy.tenants import Tenant
from gateway.policy.users import asserted
from gateway.runtime.snapshot import Runtime
from gateway.store.kept_writes import RequestWrites
from gateway.store.turns import TurnStore
from gateway.surfaces.approval_answers import Approvals, held_calls, take_answers
from gateway.surfaces.forward import Meter
from gateway.surfaces.history import put_back_into, seen_all
from gateway.surfaces.http import Exchange
from gateway.values import KeepTurn, Message, UsageCounts

if TYPE_CHECKING:
    from gateway.runtime.services import Gateway


def authorization(headers: Mapping[str, str]) -> str | None:
    """The key a request names its tenant by: its bearer token, or (as Anthropic's
    clients send it) its ``x-api-key``."""
    given = headers.get("authorization")
    if given is None and "x-api-key" in headers:
        return f"Bearer {headers['x-api-key']}"
    return given


class Admission:
    """Who is asking, and whether the rate limits let them."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    def tenant(self, request: Request, exchange: Exchange) -> tuple[Runtime, Tenant]:
        """The runtime snapshot this request uses to its end, and the tenant its key
        names (401 for none)."""
        runtime = self._gateway.runtime
        tenant = runtime.tenants.authenticate(authorization(request.headers))
        exchange.tenant = tenant.id
        return runtime, tenant

    async def __call__(
        self, request: Request, exchange: Exchange
    ) -> tuple[Runtime, Tenant, Meter | None]:
        """``tenant``, then the rate limits (their headers go on whatever the answer
        is; a tenant with a token limit has its usage charged: the meter), then the
        caller's identity within it: the end user its token names, where the tenant
        verifies users (a 401 for a token that fails), and its bound headers (a second
        value of one is a 400)."""
        runtime, tenant = self.tenant(request, exchange)
        limiter = self._gateway.limiter
        admission = await limiter.admit(tenant)
        exchange.headers |= admission.headers
        await self._identify(request, exchange, runtime, tenant)
        if not admission.metered:
            return runtime, tenant, None

        async def meter(usage: UsageCounts | None) -> None:
            await limiter.charge(tenant, usage)

        return runtime, tenant, meter

    async def caller(self, request: Request, exchange: Exchange) -> tuple[Runtime, Tenant]:
        """``tenant``, and who the caller is within it, as ``__call__`` finds them, with
        no rate limit taken: for the routes that read what a caller's requests kept."""
        runtime, tenant = self.tenant(request, exchange)
        await self._identify(request, exchange, runtime, tenant)
        return runtime, tenant

    async def _identify(
        self, request: Request, exchange: Exchange, runtime: Runtime, tenant: Tenant
    ) -> None:
        users = tenant.users
        if users is not None:  # the end user (docs/design.md §18): verified or asserted
            user = (
                asserted(request.headers, users)
                if isinstance(users, AssertedUsersConfig)
                else await self._gateway.users.user(request.headers, users)
            )
            exchange.user = user.id if user is not None else None
            exchange.user_token = user.token or None if user is not None else None
        exchange.identity = caller_identity(
            tenant.id, request.headers, runtime.registry.bound_headers, exchange.user
        )


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
    guarded: tuple[GuardVerdict, ...] = ()  # the guardrails' verdicts on its input

    def __post_init__(self) -> None:
        self.taint = self.policy.input_taint

    def passes(self, wire: str) -> bool:
        """Whether the request passes through as it came: no server tools are in play
        and its model server speaks the client's ``wire`` (a dialect's name,
        docs/design.md §20). Otherwise the loop translates, with no tools of its own."""
        policy = self.policy
        if policy.server_tools or policy.screens_answers:
            return False
        return self.route.upstream.dialect == wire

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
        if "tool" not in {m.role for m in visible}:  # no generator: a long history
            return None
        history = seen_all(visible)
        restored = await self.turns.restore(self.tenant.id, history, self.exchange.identity)
        if restored is None:
            return None
        self.tainted(restored.taint)
        return put_back_into(visible, restored)

    async def admitted(self, history: list[Message]) -> tuple[list[Message], bool]:
        """The history with what is new in it (the client's tools' answers, its words)
        screened by the guardrails about it (``GuardrailBlocked``: its input is
        withheld), and whether they changed it."""
        found = await admitted(self.policy, history)
        self.guarded = tuple(found.verdicts)
        self.tainted(found.taint)
        return found.history, found.changed

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
        held = tuple(c for c in held_calls(kept) if self.policy.serves(c.name))
        decided = await self.policy.resume(answers, held)
        return kept, Resumed(held, decided) if held else None
