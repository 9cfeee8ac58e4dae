"""A connection's consent in flight (docs/design.md §18): the link a user opens (a ticket:
short-lived, single-use, bound to tenant, user and connection) and the provider's round
trip it starts (its ``state``, with the PKCE verifier, bound to the browser that began it:
a callback in another browser finds nothing, RFC 9700 §4.7). Both are kept in the store
under a digest of their random value, so any replica finishes what another began, and
both are taken (read and deleted at once) when used: a replayed link or callback finds
nothing."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from gateway.store.base import Store
from gateway.store.keys import Keys
from tool_registry import dumps, immutable, loads_object

TICKET_TTL_S = 600.0  # a link opens within ten minutes, or not at all
STATE_TTL_S = 600.0  # the provider's round trip, at most


@immutable
class Consent:
    """Who is connecting what."""

    tenant: str
    user: str
    connection: str


class Consents:
    def __init__(self, store: Store, keys: Keys, ticket_ttl_s: float = TICKET_TTL_S) -> None:
        self._store = store
        self._keys = keys
        self.ticket_ttl_s = ticket_ttl_s

    def _key(self, kind: str, value: str) -> str:
        digest = hashlib.sha256(value.encode()).hexdigest()
        return f"{self._keys.prefix}consent:{kind}:{digest}"

    async def ticket(self, consent: Consent) -> str:
        """A new link's ticket for ``consent``."""
        ticket = secrets.token_urlsafe(32)
        record = {"tenant": consent.tenant, "user": consent.user, "connection": consent.connection}
        await self._store.put(self._key("ticket", ticket), dumps(record), self.ticket_ttl_s)
        return ticket

    async def take_ticket(self, ticket: str) -> Consent | None:
        """The consent a link stands for, once; None if it never was, expired or was used."""
        if not 16 <= len(ticket) <= 128:
            return None
        found = loads_object(await self._store.take(self._key("ticket", ticket)) or b"")
        return _consent(found)

    async def begin(self, consent: Consent, verifier: str, browser: str) -> str:
        """The ``state`` of a provider round trip for ``consent``, its verifier kept, and
        a digest of the secret the browser that began it holds (``browser``)."""
        state = secrets.token_urlsafe(32)
        record = {
            "tenant": consent.tenant,
            "user": consent.user,
            "connection": consent.connection,
            "verifier": verifier,
            "browser": hashlib.sha256(browser.encode()).hexdigest(),
        }
        await self._store.put(self._key("state", state), dumps(record), STATE_TTL_S)
        return state

    async def finish(self, state: str, browser: str | None) -> tuple[Consent, str] | None:
        """The consent and verifier of a round trip, once, in the browser that began it
        (its secret, ``browser``); None for a state not given or another browser's (the
        state is used up either way)."""
        if not 16 <= len(state) <= 128:
            return None
        found = loads_object(await self._store.take(self._key("state", state)) or b"")
        consent = _consent(found)
        verifier = found.get("verifier") if found is not None else None
        began = found.get("browser") if found is not None else None
        if consent is None or not isinstance(verifier, str) or not isinstance(began, str):
            return None
        if browser is None or not hmac.compare_digest(
            began, hashlib.sha256(browser.encode()).hexdigest()
        ):
            return None
        return consent, verifier


def _consent(found: dict[str, object] | None) -> Consent | None:
    if found is None:
        return None
    tenant, user, connection = found.get("tenant"), found.get("user"), found.get("connection")
    if not (isinstance(tenant, str) and isinstance(user, str) and isinstance(connection, str)):
        return None
    return Consent(tenant, user, connection)
