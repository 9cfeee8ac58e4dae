"""An operator's approvals (docs/design.md §13): ``GET /v1/toolgate/approvals`` lists the
calls waiting for one, ``POST /v1/toolgate/approvals/{id}`` decides one
(``{"approve": true|false, "reason": "..."}``); the run waiting for it, on whichever
replica, goes on. ``GET /v1/toolgate/approvals/decided`` says what was decided, by
whom and when.

They answer to a tenant's ``policy.approvals.admin_keys`` (its own approvals) and to
``server.admin_key`` (every tenant's), compared in constant time; the tenants' API
keys do not decide their own calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.digits import whole
from gateway.errors import BadRequest, GatewayError, NotFound, PayloadTooLarge
from gateway.policy.tenants import Tenant
from gateway.store.approval_records import HISTORY_KEPT, ApprovalRecord, Decided, Decision
from gateway.surfaces.http import Exchange, json_response
from gateway.surfaces.operator.keys import operator_admitted
from tool_registry import loads_object

if TYPE_CHECKING:
    from gateway.runtime.services import Gateway

MAX_BODY = 16 * 1024
MAX_REASON = 2000


class OperatorApprovals:
    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    async def _tenants(self, request: Request) -> tuple[tuple[Tenant, ...], str]:
        """The tenants the bearer key may decide for, and who it is (for the trace)."""
        scope = await operator_admitted(self._gateway, request, "The approval routes")
        return scope.tenants, scope.who

    async def list(self, request: Request, exchange: Exchange) -> Response:
        tenants, _ = await self._tenants(request)
        pending = await pending_for(self._gateway, tenants)
        return json_response({"object": "list", "data": [r.public() for r in pending]})

    async def decided(self, request: Request, exchange: Exchange) -> Response:
        """``GET /v1/toolgate/approvals/decided?limit=``: who decided what and when."""
        tenants, _ = await self._tenants(request)
        limit = whole(request.query_params.get("limit", "50"))
        if limit is None or not 1 <= limit <= HISTORY_KEPT:
            raise BadRequest(f"limit is a number from 1 to {HISTORY_KEPT}.", param="limit")
        found = await decided_for(self._gateway, tenants, limit)
        return json_response({"object": "list", "data": [d.public() for d in found]})

    async def decide(self, request: Request, exchange: Exchange) -> Response:
        tenants, decider = await self._tenants(request)
        approval_id = request.path_params["approval_id"]
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY:
                raise PayloadTooLarge(f"A decision's body is at most {MAX_BODY} bytes.")
        said = loads_object(body)
        if said is None or not isinstance(said.get("approve"), bool):
            raise BadRequest(
                "The body must be a JSON object with a boolean 'approve'.", param="approve"
            )
        reason = said.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise BadRequest("'reason' must be a string.", param="reason")
        decision = Decision(said["approve"], reason[:MAX_REASON] if reason else None, decider)
        address = request.client.host if request.client is not None else ""
        outcome, tenant = await decide_for(self._gateway, tenants, approval_id, decision, address)
        if outcome == "already":
            raise GatewayError(
                f"Approval {approval_id!r} is decided already.",
                status=409,
                error_type="invalid_request_error",
                code="already_decided",
            )
        if outcome == "decided" and tenant is not None:
            return json_response(_decided(approval_id, tenant, decision))
        raise NotFound(
            f"No pending approval {approval_id!r} for this key (expired, or never asked)."
        )


async def pending_for(gateway: Gateway, tenants: Sequence[Tenant]) -> list[ApprovalRecord]:
    """The approvals waiting for an operator among ``tenants``, oldest first (the JSON
    route's and the console's)."""
    store = gateway.approvals
    pending = [record for tenant in tenants for record in await store.pending(tenant.id)]
    pending.sort(key=lambda record: record.created)
    return pending


async def decided_for(
    gateway: Gateway, tenants: Sequence[Tenant], count: int = 50
) -> list[Decided]:
    """The newest ``count`` operator decisions among ``tenants``, newest first."""
    store = gateway.approvals
    found = [d for tenant in tenants for d in await store.history(tenant.id, count)]
    found.sort(key=lambda d: d.decided_at, reverse=True)
    return found[:count]


async def decide_for(
    gateway: Gateway,
    tenants: Sequence[Tenant],
    approval_id: str,
    decision: Decision,
    address: str = "",
) -> tuple[str, str | None]:
    """Decide ``approval_id`` for whichever of ``tenants`` it waits in: ``decided`` or
    ``already`` (the first decision stands) and that tenant, or ``missing``. A decision
    that stands goes into the audit log (``store/audit.py``)."""
    approvals = gateway.approvals
    for tenant in tenants:
        record = await approvals.peek(tenant.id, approval_id)
        if record is None:
            continue
        outcome = await approvals.decide(tenant.id, approval_id, decision)
        if outcome == "decided":
            reason = f": {decision.reason}" if decision.reason else ""
            await gateway.audit.write(
                decision.decider,
                "approved" if decision.approve else "denied",
                tenant.id,
                f"{record.tool} ({approval_id}){reason}",
                address,
            )
        if outcome in ("already", "decided"):
            return outcome, tenant.id
    return "missing", None


def _decided(approval_id: str, tenant: str, decision: Decision) -> dict[str, Any]:
    return {
        "id": approval_id,
        "object": "toolgate.approval.decision",
        "tenant": tenant,
        "approve": decision.approve,
        "reason": decision.reason,
    }
