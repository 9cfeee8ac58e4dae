"""``POST /admin/reload``: read the configuration again (DESIGN.md §12).

It answers only to ``server.admin_key`` (as a bearer key, compared in constant time);
without one configured the route does not exist. A reload that fails keeps the
running configuration and answers 422 with the reason.
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from gateway.errors import AuthError, GatewayError, NotFound
from gateway.surfaces.http import Exchange, json_response

if TYPE_CHECKING:
    from gateway.runtime.services import Gateway


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
