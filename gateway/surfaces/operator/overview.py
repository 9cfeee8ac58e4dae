"""The operator's overview (docs/design.md §19, JSON first): ``GET /v1/toolgate/overview`` —
each tenant's requests, errors, tool calls, spend and mean latency per minute over the last hour
(the gateway's own counts, every replica's: no Prometheus needed) and the approvals
waiting now — and ``GET /v1/toolgate/health`` (the admin key's) — the probe's words
for each model server, tool origin and remote source, and the model servers the
gateway has seen fail since (``?fresh=true`` probes again now)."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.errors import NotFound
from gateway.policy.prices import usd
from gateway.policy.tenants import Tenant
from gateway.runtime.health import Checked, Health
from gateway.store.activity import MINUTES, Minute
from gateway.surfaces.http import Exchange, json_response
from gateway.surfaces.operator.approvals import pending_for
from gateway.surfaces.operator.keys import operator_admitted

if TYPE_CHECKING:
    from gateway.runtime.services import Gateway

ROUTES = "The overview routes"
SERIES = ("requests", "errors", "tool_calls", "cost_usd", "latency_ms")


def series(minutes: list[Minute]) -> dict[str, list[float]]:
    """A tenant's minutes as one list per measure, oldest first."""
    return {
        "requests": [m.requests for m in minutes],
        "errors": [m.errors for m in minutes],
        "tool_calls": [m.tool_calls for m in minutes],
        "cost_usd": [usd(m.cost_nanos) for m in minutes],
        "latency_ms": [round(m.latency_ms / m.requests) if m.requests else 0 for m in minutes],
    }


def totals(minutes: list[Minute], drawn: dict[str, list[float]]) -> dict[str, float]:
    """The hour's: sums, and the mean latency of all its requests."""
    found = {name: round(sum(drawn[name]), 9) for name in SERIES}
    requests = sum(m.requests for m in minutes)
    found["latency_ms"] = round(sum(m.latency_ms for m in minutes) / requests) if requests else 0
    return found


async def overview(gateway: Gateway, tenants: tuple[Tenant, ...]) -> dict[str, Any]:
    now = gateway.clock()  # the clock the counts were made by
    ids = [tenant.id for tenant in tenants]
    hour = await gateway.activity.last_hour(ids, now)
    waiting: dict[str, int] = dict.fromkeys(ids, 0)
    for record in await pending_for(gateway, tenants):
        waiting[record.tenant] = waiting.get(record.tenant, 0) + 1
    rows = []
    for tenant_id in ids:
        minutes = hour[tenant_id]
        drawn = series(minutes)
        rows.append(
            {
                "id": tenant_id,
                **drawn,
                "totals": totals(minutes, drawn),
                "pending_approvals": waiting[tenant_id],
            }
        )
    first = int(now // 60) - MINUTES + 1
    return {
        "object": "toolgate.overview",
        "since": first * 60,
        "minutes": MINUTES,
        "tenants": rows,
    }


def health_of(gateway: Gateway, checked: Checked) -> dict[str, Any]:
    return {
        "object": "toolgate.health",
        "checked_at": checked.at,
        "probes": [asdict(probe) for probe in checked.probes],
        "upstreams_failing": dict(gateway.model_servers.trouble),
    }


class Overview:
    def __init__(self, gateway: Gateway, health: Health) -> None:
        self._gateway = gateway
        self._health = health  # the probe's words, kept a while (shared with the console)

    async def get(self, request: Request, exchange: Exchange) -> Response:
        scope = await operator_admitted(self._gateway, request, ROUTES)
        return json_response(await overview(self._gateway, scope.tenants))

    async def health(self, request: Request, exchange: Exchange) -> Response:
        scope = await operator_admitted(self._gateway, request, ROUTES)
        if not scope.admin:
            raise NotFound("The gateway's health is the admin key's to read.")
        again = request.query_params.get("fresh") == "true"
        checked = await self._health.checked(again)
        return json_response(health_of(self._gateway, checked))
