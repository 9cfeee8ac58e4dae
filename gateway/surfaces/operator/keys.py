"""Who an operator's key speaks for (docs/design.md §13, §19), decided in one place for every
operator route: ``server.admin_key`` for every tenant, a tenant's
``policy.approvals.admin_keys`` for that tenant only. Keys are compared as digests in
constant time; the tenants' own API keys are not operators' keys. Each key's requests
of the operator routes are rate limited (``server.operator_requests_per_minute``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.requests import Request

from gateway.errors import AuthError, RateLimited
from gateway.policy.tenants import Tenant
from gateway.runtime.snapshot import Runtime
from gateway.surfaces.http import bearer_digest, is_key

if TYPE_CHECKING:
    from gateway.runtime.services import Gateway


@dataclass(frozen=True)
class OperatorScope:
    """The tenants a key may see and steer, and who it is (for traces and decisions)."""

    tenants: tuple[Tenant, ...]
    # ``operator:admin``; ``operator:`` and the key's name, or its digest's first 8 digits.
    who: str
    admin: bool

    def tenant(self, tenant_id: str) -> Tenant | None:
        return next((t for t in self.tenants if t.id == tenant_id), None)


def operator_scope(runtime: Runtime, request: Request, routes: str) -> OperatorScope:
    """The scope of the request's bearer key, or ``AuthError`` (401) saying that
    ``routes`` (``"The approval routes"``) need an operator's key."""
    presented = bearer_digest(request)
    if presented is None:
        raise AuthError(f"{routes} need an operator's key (admin or approvals) as a bearer.")
    scope = scope_of(runtime, presented)
    if scope is None:
        raise AuthError(f"This key is not an operator's key: {routes.lower()} refuse it.")
    return scope


def scope_of(runtime: Runtime, presented: bytes) -> OperatorScope | None:
    """What the key whose SHA-256 digest is ``presented`` may see and steer now (None:
    it is no operator's key), by the configuration in force: a key taken out of it
    stops working at once, wherever it was presented (a console session too)."""
    tenants = runtime.tenants.all()
    if is_key(presented, runtime.config.server.admin_key):
        return OperatorScope(tuple(tenants), "operator:admin", admin=True)
    allowed, name = [], None
    for tenant in tenants:
        for named in tenant.policy.approvals.admin_keys:
            if is_key(presented, named.key):
                allowed.append(tenant)
                name = name or named.name
                break
    if not allowed:
        return None
    return OperatorScope(tuple(allowed), f"operator:{name or presented.hex()[:8]}", admin=False)


async def operator_admitted(gateway: Gateway, request: Request, routes: str) -> OperatorScope:
    """``operator_scope``, and one request taken from the key's budget of the operator
    routes: past it, a 429 with ``retry-after``."""
    runtime = gateway.runtime
    scope = operator_scope(runtime, request, routes)
    per_minute = runtime.config.server.operator_requests_per_minute
    wait = await gateway.limiter.admit_browser(scope.who, per_minute, "operator")
    if wait is not None:
        raise RateLimited(
            f"{routes} take {per_minute} requests a minute from one key: try again shortly.",
            headers={"retry-after": str(max(1, math.ceil(wait)))},
        )
    return scope
