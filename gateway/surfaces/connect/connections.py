"""The routes a user's application has for the user's connections (docs/design.md §18):
which services the verified user has connected (name, scopes, expiry — never a
token), and revoking one (at the provider's revocation endpoint where it has one, then
forgotten either way). The tenant's key and the user's own token say whose."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from gateway.config import McpConnection, OAuth2Connection
from gateway.errors import BadRequest, NotFound
from gateway.runtime.oauth import callback_url
from gateway.runtime.providers import ProviderRefused
from gateway.store.grants import GrantStore
from gateway.surfaces.head import Admission
from gateway.surfaces.http import Exchange, json_response

if TYPE_CHECKING:
    from gateway.runtime.services import Gateway


class Connections:
    def __init__(self, gateway: Gateway, admit: Admission) -> None:
        self._gateway = gateway
        self._admit = admit

    async def _whose(self, request: Request, exchange: Exchange) -> tuple[GrantStore, str, str]:
        """The grants, the tenant and the verified user a request is about."""
        _, tenant, _ = await self._admit(request, exchange)
        grants = self._gateway.grants
        if grants is None:
            raise NotFound("This gateway keeps no connections (no grants section is configured).")
        if exchange.user is None:
            raise BadRequest(
                "Connections belong to a user: send the user's token (or id) "
                "(the tenant's users settings name the header).",
                code="user_required",
            )
        return grants, tenant.id, exchange.user

    async def list(self, request: Request, exchange: Exchange) -> Response:
        grants, tenant, user = await self._whose(request, exchange)
        found = await grants.all(tenant, user)
        return json_response(
            {
                "object": "list",
                "data": [{"object": "toolgate.connection", **g.public()} for g in found],
            }
        )

    async def forget(self, request: Request, exchange: Exchange) -> Response:
        grants, tenant, user = await self._whose(request, exchange)
        name = request.path_params["name"]
        grant = await grants.get(tenant, user, name)
        if grant is None:
            raise NotFound(f"No connection {name[:64]!r} for this user.")
        revoked = False
        config = self._gateway.runtime.config
        for connection in config.connections:
            if connection.name != name or not isinstance(
                connection, OAuth2Connection | McpConnection
            ):
                continue
            # The provider's revocation first, where it has one; forgotten either way.
            try:
                callback = callback_url(config.server.public_url or "")
                client = await self._gateway.providers.client(connection, callback)
            except ProviderRefused:
                break
            revoked = await self._gateway.oauth.revoke(client, grant)
        await grants.forget(tenant, user, name)
        return json_response(
            {
                "object": "toolgate.connection",
                "connection": name,
                "deleted": True,
                "revoked": revoked,
            }
        )
