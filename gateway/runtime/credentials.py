"""A request's user's tokens, for the tools that call as the user (DESIGN.md §18): the
grant of the connection a tool names, refreshed before it expires (one refresh at a
time across replicas), or — when there is none, it expired beyond refreshing, or the
provider refused the refresh (the grant is then forgotten) — a link where the user
makes the connection: a short-lived, single-use ticket bound to tenant, user and
connection."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from gateway.config import OAuth2Connection
from gateway.runtime.oauth import CONNECT_PATH, OAuthClient, ProviderRefused
from gateway.store.consent import Consent, Consents
from gateway.store.grants import Grant, GrantStore
from gateway.values import ConnectLink

logger = logging.getLogger("gateway.connect")


class UserCredentials:
    """One request's: its tenant, its verified user (None: no user to act for)."""

    def __init__(
        self,
        connections: Sequence[OAuth2Connection],
        grants: GrantStore,
        consents: Consents,
        oauth: OAuthClient,
        public_url: str,
        tenant: str,
        user: str | None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._connections = {c.name: c for c in connections}
        self._grants = grants
        self._consents = consents
        self._oauth = oauth
        self._public = public_url.rstrip("/")
        self._tenant = tenant
        self._user = user
        self._clock = clock

    async def bearer(self, connection: str) -> str | ConnectLink | None:
        user, configured = self._user, self._connections.get(connection)
        if user is None:
            return None
        grant = await self._grants.get(self._tenant, user, connection)
        if grant is not None and configured is not None:
            grant = await self._fresh(configured, user, grant)
        if grant is not None and configured is not None:
            return grant.access_token
        ticket = await self._consents.ticket(Consent(self._tenant, user, connection))
        return ConnectLink(connection, f"{self._public}{CONNECT_PATH}/{ticket}")

    async def _fresh(self, connection: OAuth2Connection, user: str, grant: Grant) -> Grant | None:
        """The grant, refreshed if it is (about to be) expired; None if it cannot be."""
        now = self._clock()
        if not grant.expired(now, connection.refresh_margin_s):
            return grant
        if grant.refresh_token is None:
            return None if grant.expired(now) else grant

        async def refresh(old: Grant) -> Grant:
            return await self._oauth.refresh(connection, old)

        try:
            return await self._grants.refreshed(self._tenant, user, grant, refresh)
        except ProviderRefused as exc:  # revoked, most likely: the user connects again
            logger.warning("grant of %s not refreshed, forgotten: %s", connection.name, exc)
            await self._grants.forget(self._tenant, user, connection.name)
            return None
