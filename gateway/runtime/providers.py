"""A consent-flow connection as the gateway speaks to its provider (docs/design.md §18):
the ``ProviderClient`` value — the endpoints, who the gateway is there, what it asks for — is
made here, in one place, for each kind:

- ``oauth2`` with its endpoints given: as configured;
- ``oauth2`` with an ``issuer``: the endpoints its metadata names (RFC 8414 or OpenID
  Connect Discovery), each on the issuer's origin or one the operator listed;
- ``mcp``: the MCP server's protected resource metadata (RFC 9728) names its
  authorization server (one the operator accepts, where ``issuers`` is set), whose
  metadata names the endpoints; the gateway's own client there is the one configured,
  else one it registered (RFC 7591), kept for every replica; every request carries the
  server as the resource indicator (RFC 8707).

A provider that cannot be reached is ``ProviderUnreachable`` (try again later: a grant
is kept); one whose answers cannot be believed is ``ProviderRefused``.
"""

from __future__ import annotations

from dataclasses import field, replace

import httpx

from gateway.config import (
    AssertedUsersConfig,
    JwtUsersConfig,
    McpConnection,
    OAuth2Connection,
    TokenExchangeConnection,
)
from gateway.runtime.discovery import (
    Discovery,
    DiscoveryFailed,
    DiscoveryUnreached,
    ServerMetadata,
)
from gateway.runtime.outbound import Unreached, fetch, peek
from gateway.store.registrations import Registration, Registrations
from tool_registry import GuardedTransport, dumps, immutable, loads_object

ConsentConnection = OAuth2Connection | McpConnection
MAX_ANSWER_BYTES = 64 * 1024
TIMEOUT_S = 10.0
PROBE_S = 3.0  # a probe of a token endpoint
CLIENT_NAME = "Toolgate"


class ProviderRefused(ValueError):
    """The provider refused, or answered what cannot be believed; the message says why
    and names no token or secret."""


class ProviderUnreachable(ProviderRefused):
    """The provider (or its metadata) could not be reached: nothing it holds is lost."""


@immutable
class ProviderClient:
    """One connection at its provider."""

    connection: str
    authorize_url: str
    token_url: str
    client_id: str
    client_secret: str | None = field(default=None, repr=False)
    revoke_url: str | None = None
    scopes: tuple[str, ...] = ()
    params: tuple[tuple[str, str], ...] = ()  # more authorize parameters
    resource: str | None = None  # RFC 8707: on the authorize and token requests
    issuer: str | None = None  # a callback's ``iss`` must be this (RFC 9207) ...
    names_itself: bool = False  # ... and must be there, where the server says it sends one
    jwks_uri: str | None = None  # its keys, which an ID token it answers must hold under


class Providers:
    def __init__(
        self,
        transport: GuardedTransport,
        discovery: Discovery,
        registrations: Registrations | None,
    ) -> None:
        self._transport = transport
        self._discovery = discovery
        self._registrations = registrations

    async def client(self, connection: ConsentConnection, redirect_uri: str) -> ProviderClient:
        if isinstance(connection, McpConnection):
            return await self._mcp(connection, redirect_uri)
        secret = connection.client_secret
        client = ProviderClient(
            connection=connection.name,
            authorize_url=connection.authorize_url or "",
            token_url=connection.token_url or "",
            client_id=connection.client_id,
            client_secret=secret.get_secret_value() if secret is not None else None,
            revoke_url=connection.revoke_url,
            scopes=connection.scopes,
            params=tuple(connection.params.items()),
        )
        if connection.issuer is None:  # the endpoints as configured
            return client
        server = await self._server(connection.issuer, connection.endpoint_origins)
        return replace(
            client,
            authorize_url=_authorize(server),
            token_url=_token(server),
            revoke_url=connection.revoke_url or server.revocation_endpoint,
            issuer=server.issuer,
            names_itself=server.iss_parameter,
            jwks_uri=server.jwks_uri,
        )

    async def probe(
        self, connection: OAuth2Connection | McpConnection | TokenExchangeConnection
    ) -> str:
        """What ``toolgate check --probe`` says of a connection's provider, read as a
        user's first connection would read it (metadata, not a token: nothing is asked
        for, nothing registered); ``ProviderRefused`` says why it cannot be used."""
        if isinstance(connection, McpConnection):
            try:
                resource = await self._discovery.resource(connection.url)
            except DiscoveryFailed as exc:
                raise _failed(f"the MCP server's resource metadata: {exc}", exc) from exc
            accepted = [
                i
                for i in resource.authorization_servers
                if not connection.issuers or i in connection.issuers
            ]
            if not accepted:
                raise ProviderRefused("the MCP server names no authorization server accepted here")
            server = await self._server(accepted[0], connection.endpoint_origins)
            return f"its authorization server {server.issuer} named its endpoints"
        if isinstance(connection, OAuth2Connection) and connection.issuer is not None:
            server = await self._server(connection.issuer, connection.endpoint_origins)
            return f"its metadata named the endpoints (issuer {server.issuer})"
        token_url = connection.token_url or ""
        try:
            status, _ = await peek(self._transport, httpx.Request("GET", token_url), PROBE_S)
        except Unreached as exc:
            raise ProviderUnreachable(f"its token endpoint: {exc}") from exc
        return f"its token endpoint answered HTTP {status} (asked nothing: a GET)"

    async def _server(self, issuer: str, origins: tuple[str, ...]) -> ServerMetadata:
        try:
            return await self._discovery.server(issuer, origins)
        except DiscoveryFailed as exc:
            raise _failed(f"the provider's metadata: {exc}", exc) from exc

    async def _mcp(self, connection: McpConnection, redirect_uri: str) -> ProviderClient:
        try:
            resource = await self._discovery.resource(connection.url)
        except DiscoveryFailed as exc:
            raise _failed(f"the MCP server's resource metadata: {exc}", exc) from exc
        accepted = [
            issuer
            for issuer in resource.authorization_servers
            if not connection.issuers or issuer in connection.issuers
        ]
        if not accepted:
            raise ProviderRefused("the MCP server names no authorization server accepted here")
        server = await self._server(accepted[0], connection.endpoint_origins)
        if connection.client_id is not None:
            secret = connection.client_secret
            registration = Registration(
                connection.client_id, secret.get_secret_value() if secret else None
            )
        else:
            registration = await self._registered(connection, server, redirect_uri)
        return ProviderClient(
            connection=connection.name,
            authorize_url=_authorize(server),
            token_url=_token(server),
            client_id=registration.client_id,
            client_secret=registration.client_secret,
            revoke_url=server.revocation_endpoint,
            scopes=connection.scopes or resource.scopes,
            resource=resource.resource,
            issuer=server.issuer,
            names_itself=server.iss_parameter,
            jwks_uri=server.jwks_uri,
        )

    async def _registered(
        self, connection: McpConnection, server: ServerMetadata, redirect_uri: str
    ) -> Registration:
        """The gateway's client at ``server``: kept, else registered now (RFC 7591)."""
        if self._registrations is None:
            raise ProviderRefused("no store for registered clients (a grants section)")
        kept = await self._registrations.get(connection.name, server.issuer)
        if kept is not None:
            return kept
        if server.registration_endpoint is None:
            raise ProviderRefused(
                "the authorization server does not register clients: configure a client_id"
            )
        metadata = {
            "client_name": CLIENT_NAME,
            "redirect_uris": [redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "client_secret_basic",
        }
        request = httpx.Request(
            "POST",
            server.registration_endpoint,
            content=dumps(metadata),
            headers={"content-type": "application/json", "accept": "application/json"},
        )
        try:
            got = await fetch(self._transport, request, TIMEOUT_S, MAX_ANSWER_BYTES)
        except Unreached as exc:
            raise ProviderUnreachable(f"the registration endpoint ({exc})") from exc
        found = None if got.cut else loads_object(got.body)
        if got.status not in (200, 201) or found is None:
            raise ProviderRefused(f"the authorization server did not register it ({got.status})")
        client_id, secret = found.get("client_id"), found.get("client_secret")
        if not isinstance(client_id, str) or not 0 < len(client_id) <= 512:
            raise ProviderRefused("the registration's answer holds no usable client_id")
        if secret is not None and (not isinstance(secret, str) or not 0 < len(secret) <= 4096):
            raise ProviderRefused("the registration's answer holds no usable client_secret")
        made = Registration(client_id, secret)
        return await self._registrations.keep(connection.name, server.issuer, made)


def _authorize(server: ServerMetadata) -> str:
    if server.authorization_endpoint is None:
        raise ProviderRefused("the provider's metadata names no authorization endpoint")
    return server.authorization_endpoint


def _token(server: ServerMetadata) -> str:
    if server.token_endpoint is None:
        raise ProviderRefused("the provider's metadata names no token endpoint")
    return server.token_endpoint


def _failed(message: str, exc: DiscoveryFailed) -> ProviderRefused:
    return (ProviderUnreachable if isinstance(exc, DiscoveryUnreached) else ProviderRefused)(
        message
    )


def same_issuer(client: ProviderClient, named: str | None) -> bool:
    """Whether a callback's ``iss`` (RFC 9207) fits: the issuer where one is known and
    named, present where the server said it names itself."""
    if client.issuer is None:  # endpoints as configured: nothing to hold it to
        return True
    if named is None:
        return not client.names_itself
    return named == client.issuer


def subject_to_hold(
    users: AssertedUsersConfig | JwtUsersConfig | None, client: ProviderClient, user: str
) -> tuple[str, str] | None:
    """Where a connection's provider is also the identity provider that names a tenant's
    users (one issuer), the claim and value a grant's ID token must hold: the user the
    link was made for (else someone else's account would act for them). None where the
    provider names no users of the tenant's, or cannot be told to (no issuer known)."""
    if not isinstance(users, JwtUsersConfig) or client.issuer is None:
        return None
    if users.issuer.rstrip("/") != client.issuer.rstrip("/"):
        return None
    return users.claim, user


def with_openid(client: ProviderClient) -> ProviderClient:
    """``client`` asking for the ``openid`` scope too (an ID token in its answer)."""
    if "openid" in client.scopes:
        return client
    return replace(client, scopes=(*client.scopes, "openid"))
