"""``GET /v1/toolgate/usage?tenant=&window=day|month`` (docs/design.md §13): what tenants
have spent in the current window, from the counters every replica shares.

A tenant's API key reads its own; ``server.admin_key`` reads every tenant's (or the one
``tenant`` names). A tenant is counted when it has a ``budget`` or its requests go to a
priced model; reservations of requests still running are part of what it has spent.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.errors import BadRequest, NotFound, PolicyDenied
from gateway.policy.prices import usd
from gateway.policy.run_budget import window_limits
from gateway.policy.tenants import Tenant
from gateway.store.budget_counters import WINDOWS, TenantWindow, WindowName
from gateway.surfaces.http import Exchange, bearer_digest, is_key, json_response

if TYPE_CHECKING:
    from gateway.runtime.services import Gateway


def _row(tenant: Tenant, window: TenantWindow, used: tuple[int, int]) -> dict[str, Any]:
    tokens, nanos = used
    limit = window.window
    row: dict[str, Any] = {
        "tenant": tenant.id,
        "window": window.period.window,
        "period": window.period.label,
        "resets_at": datetime.fromtimestamp(window.period.resets_at, UTC).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        ),
        "tokens": tokens,
        "cost_usd": usd(nanos),
        "limit_tokens": limit.tokens,
        "limit_cost_usd": None if limit.nanos is None else usd(limit.nanos),
        "remaining_tokens": None if limit.tokens is None else max(limit.tokens - tokens, 0),
        "remaining_usd": None if limit.nanos is None else usd(max(limit.nanos - nanos, 0)),
    }
    return row


class UsageReport:
    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    def _tenants(self, request: Request, exchange: Exchange, asked: str | None) -> list[Tenant]:
        directory = self._gateway.runtime.tenants
        presented = bearer_digest(request)
        admin = self._gateway.runtime.config.server.admin_key
        if presented is not None and is_key(presented, admin):
            tenants = directory.all()
            if asked is None:
                return tenants
            found = [t for t in tenants if t.id == asked]
            if not found:
                raise NotFound(f"No tenant {asked!r}.", param="tenant")
            return found
        tenant = directory.authenticate(request.headers.get("authorization"))
        exchange.tenant = tenant.id
        if asked is not None and asked != tenant.id:
            raise PolicyDenied(
                "A tenant's API key reads its own usage only.", param="tenant", code="not_allowed"
            )
        return [tenant]

    async def get(self, request: Request, exchange: Exchange) -> Response:
        params = request.query_params
        window = params.get("window", "day")
        if window not in WINDOWS:
            raise BadRequest("'window' must be 'day' or 'month'.", param="window")
        name: WindowName = "day" if window == "day" else "month"
        tenants = self._tenants(request, exchange, params.get("tenant") or None)
        rows = await usage_rows(self._gateway, tenants, (name,))
        return json_response({"object": "list", "data": rows})


async def usage_rows(
    gateway: Gateway, tenants: list[Tenant], names: tuple[WindowName, ...] = ("day", "month")
) -> list[dict[str, Any]]:
    """What each of ``tenants`` has spent in the current ``names`` windows, and what is
    left of its budget there, tenant by tenant (one read of the shared counters)."""
    store = gateway.budgets.store
    windows = [
        (tenant, window)
        for tenant in tenants
        for window in store.windows(
            tenant.id, {name: window_limits(tenant.budget)[name] for name in names}
        )
    ]
    used = await store.used([w for _, w in windows])
    return [_row(t, w, u) for (t, w), u in zip(windows, used, strict=True)]
