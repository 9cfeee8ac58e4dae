"""The admin routes: ``POST /admin/reload`` reads the configuration again (docs/design.md
§12); ``POST /v1/toolgate/replays`` replays recorded requests against a model and
reports how they compare (issue 26), so a CI job can gate a model change on it.

They answer only to ``server.admin_key`` (as a bearer key, compared in constant time);
without one configured they do not exist. A reload that fails keeps the running
configuration and answers 422 with the reason.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.errors import AuthError, BadRequest, GatewayError, NotFound
from gateway.runtime.replayer import Replayer
from gateway.runtime.trajectories import replay_all, summary
from gateway.surfaces.http import Exchange, json_response, read_body
from tool_registry import loads

if TYPE_CHECKING:
    from gateway.runtime.services import Gateway

MAX_REPLAYS = 100  # recordings one request may replay


class Admin:
    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    def _authorise(self, request: Request) -> None:
        key = self._gateway.runtime.config.server.admin_key
        if key is None:
            raise NotFound(f"Unknown route {request.method} {request.url.path}.")
        expected = f"Bearer {key.get_secret_value()}".encode()
        given = request.headers.get("authorization", "").encode()
        if not hmac.compare_digest(given, expected):
            raise AuthError("The admin routes need the admin key as 'Authorization: Bearer'.")

    async def reload(self, request: Request, exchange: Exchange) -> Response:
        self._authorise(request)
        result = await self._gateway.runtimes.reload()
        if not result.ok:
            raise GatewayError(
                f"The configuration was not reloaded; the running one stays. {result.message}",
                status=422,
                error_type="invalid_request_error",
                code="reload_failed",
            )
        return json_response(
            {
                "object": "toolgate.reload",
                "status": "reloaded",
                "tools": result.tools,
                "warnings": result.warnings,
            }
        )

    async def replays(self, request: Request, exchange: Exchange) -> Response:
        """``{"model", "tenant", "request_ids": [...], "recordings": [...],
        "live_read_tools"}``: each recording (by its request id, from the tenant's
        traces, or given whole) replayed against ``model``; the reports and their
        summary."""
        self._authorise(request)
        gateway = self._gateway
        server = gateway.runtime.config.server
        raw = await read_body(request, exchange, server, gateway.large_bodies)
        try:
            asked = loads(raw)
        except ValueError:
            raise BadRequest("The body is not JSON.") from None
        if not isinstance(asked, dict) or not isinstance(asked.get("model"), str):
            raise BadRequest("Name the model to replay against: 'model'.", param="model")
        tenant = asked.get("tenant")
        ids = asked.get("request_ids") or []
        given = asked.get("recordings") or []
        if not isinstance(ids, list) or not isinstance(given, list):
            raise BadRequest("'request_ids' and 'recordings' are lists.")
        if not ids and not given:
            raise BadRequest("Give 'request_ids' (with 'tenant') or 'recordings'.")
        if len(ids) + len(given) > MAX_REPLAYS:
            raise BadRequest(f"At most {MAX_REPLAYS} recordings a request.")
        if ids and not isinstance(tenant, str):
            raise BadRequest("Recordings by request id need their 'tenant'.", param="tenant")
        recordings: list[tuple[str, Any]] = [(f"recordings[{i}]", r) for i, r in enumerate(given)]
        live = asked.get("live_read_tools") is True
        return json_response(
            await replays(gateway, asked["model"], tenant, ids, recordings, live=live)
        )


async def replays(
    gateway: Gateway,
    model: str,
    tenant: Any,
    request_ids: list[Any],
    recordings: Sequence[tuple[str, Any]] = (),
    live: bool = False,
) -> dict[str, Any]:
    """Recordings replayed against ``model`` — given whole, or by the request ids of
    ``tenant``'s kept traces — with their reports and summary (the JSON route's and the
    console's)."""
    named = list(recordings)
    for request_id in request_ids:
        found = None
        if gateway.traces is not None and isinstance(request_id, str):
            found = await gateway.traces.load(str(tenant), request_id)
        named.append((str(request_id), found.get("recording") if found else None))
    replayer = Replayer(
        gateway.runtime, gateway.upstream_wire, gateway.tool_transport, gateway.guard
    )
    reports, failures = await replay_all(
        replayer, named, model, tenant, live, gateway.runtime.config
    )
    return {"object": "toolgate.replays", "summary": summary(reports, failures), "reports": reports}
