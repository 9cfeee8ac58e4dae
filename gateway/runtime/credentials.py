"""A request's user's tokens, for the tools that call as the user (docs/design.md §18).

An ``oauth2`` or ``mcp`` connection: the user's grant, refreshed before it expires (one
refresh at a time across replicas), or — when there is none, it expired beyond
refreshing, or the provider refused the refresh (the grant is then forgotten) — a link
where the user makes the connection: a short-lived, single-use ticket bound to tenant,
user and connection. A provider that cannot be reached forgets nothing: the call is
refused as unavailable now. A ``token_exchange`` connection: the token the verified
end-user token is exchanged for (RFC 8693), kept sealed like a grant until it is about
to expire, then exchanged again; no consent round trip, and a refusal is said as one."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from gateway.config import McpConnection, OAuth2Connection, TokenExchangeConnection
from gateway.runtime.oauth import OAuthClient, callback_url
from gateway.runtime.providers import (
    ConsentConnection,
    ProviderRefused,
    Providers,
    ProviderUnreachable,
)
from gateway.store.consent import Consent, Consents
from gateway.store.grants import Grant, GrantStore
from gateway.values import CONNECT_PATH, ConnectLink, CredentialRefused

logger = logging.getLogger("gateway.connect")


class UserCredentials:
    """One request's: its tenant, its verified user (None: no user to act for)."""

    def __init__(
        self,
        connections: Sequence[OAuth2Connection | TokenExchangeConnection | McpConnection],
        grants: GrantStore,
        consents: Consents,
        oauth: OAuthClient,
        providers: Providers,
        public_url: str,
        tenant: str,
        user: str | None,
        subject_token: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._connections = {c.name: c for c in connections}
        self._grants = grants
        self._consents = consents
        self._oauth = oauth
        self._providers = providers
        self._public = public_url.rstrip("/")
        self._tenant = tenant
        self._user = user
        self._subject = subject_token  # the verified end-user token (never shown)
        self._clock = clock

    async def bearer(self, connection: str) -> str | ConnectLink | CredentialRefused | None:
        user, configured = self._user, self._connections.get(connection)
        if user is None:
            return None
        if isinstance(configured, TokenExchangeConnection):
            return await self._exchanged(configured, user)
        grant = await self._grants.get(self._tenant, user, connection)
        if grant is not None and configured is not None:
            try:
                grant = await self._fresh(configured, user, grant)
            except ProviderUnreachable:
                return CredentialRefused(connection, "its provider cannot be reached now")
        if grant is not None and configured is not None:
            return grant.access_token
        if configured is None:
            return CredentialRefused(connection, "the gateway no longer offers it")
        ticket = await self._consents.ticket(Consent(self._tenant, user, connection))
        title = configured.display_name or connection
        return ConnectLink(connection, f"{self._public}{CONNECT_PATH}/{ticket}", title)

    async def refused(self, connection: str) -> None:
        """A tool answered 401 to the user's token (the grant was revoked at the
        provider, most likely): the grant is refreshed on its next use, and forgotten
        where it cannot be (the next call gives the user a link, or exchanges again)."""
        user, configured = self._user, self._connections.get(connection)
        if user is None or configured is None:
            return
        grant = await self._grants.get(self._tenant, user, connection)
        if grant is None:
            return
        if isinstance(configured, TokenExchangeConnection) or grant.refresh_token is None:
            await self._grants.forget(self._tenant, user, connection)
        else:
            await self._grants.put(self._tenant, user, replace(grant, expires_at=0.0))

    async def _exchanged(
        self, connection: TokenExchangeConnection, user: str
    ) -> str | CredentialRefused | None:
        """The exchanged token kept for the user, or a new exchange's."""
        kept = await self._grants.get(self._tenant, user, connection.name)
        if kept is not None and not kept.expired(self._clock(), connection.refresh_margin_s):
            return kept.access_token
        if self._subject is None:
            return None
        try:
            grant = await self._oauth.exchange_token(connection, self._subject)
        except ProviderUnreachable:
            return CredentialRefused(connection.name, "its provider cannot be reached now")
        except ProviderRefused as exc:
            logger.warning("token exchange for %s refused: %s", connection.name, exc)
            return CredentialRefused(connection.name, "the provider refused the exchange")
        await self._grants.put(self._tenant, user, grant)
        return grant.access_token

    async def _fresh(self, connection: ConsentConnection, user: str, grant: Grant) -> Grant | None:
        """The grant, refreshed if it is (about to be) expired; None if it cannot be.
        ``ProviderUnreachable`` where the provider cannot be asked now and the grant
        has expired (one that has not yet is used as it is)."""
        now = self._clock()
        if not grant.expired(now, connection.refresh_margin_s):
            return grant
        if grant.refresh_token is None:
            return None if grant.expired(now) else grant

        async def refresh(old: Grant) -> Grant:
            client = await self._providers.client(connection, callback_url(self._public))
            return await self._oauth.refresh(client, old)

        try:
            return await self._grants.refreshed(self._tenant, user, grant, refresh)
        except ProviderUnreachable as exc:
            logger.warning("grant of %s not refreshed now: %s", connection.name, exc)
            if grant.expired(self._clock()):
                raise
            return grant
        except ProviderRefused as exc:  # revoked, most likely: the user connects again
            logger.warning("grant of %s not refreshed, forgotten: %s", connection.name, exc)
            await self._grants.forget(self._tenant, user, connection.name)
            return None
