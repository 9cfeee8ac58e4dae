"""Clients the gateway registered at authorization servers (RFC 7591 dynamic client
registration, for ``mcp`` connections, docs/design.md §18): one per connection and server,
kept in the store so every replica uses the same one (a refresh token belongs to the
client it was issued to), its secret sealed like a grant.

The first replica to register wins: a registration is kept only where none was
(``put_new``), and a replica that lost the race uses the winner's."""

from __future__ import annotations

import hashlib
from dataclasses import field

from gateway.store.base import Store
from gateway.store.grants import GrantUnreadable, Sealer
from gateway.store.keys import Keys
from tool_registry import dumps, immutable, loads_object

KEPT_S = 400 * 86400.0


@immutable
class Registration:
    """The gateway's client at one authorization server."""

    client_id: str
    client_secret: str | None = field(default=None, repr=False)


def _bound(connection: str, issuer: str) -> bytes:
    return "\0".join(("toolgate-client", connection, issuer)).encode()


class Registrations:
    def __init__(self, store: Store, keys: Keys, sealer: Sealer) -> None:
        self._store = store
        self._keys = keys
        self._sealer = sealer

    def _key(self, connection: str, issuer: str) -> str:
        digest = hashlib.sha256(issuer.encode()).hexdigest()[:32]
        return f"{self._keys.prefix}clients:{connection}:{digest}"

    async def get(self, connection: str, issuer: str) -> Registration | None:
        stored = await self._store.get(self._key(connection, issuer))
        if stored is None:
            return None
        try:
            plain, _ = self._sealer.open(stored, _bound(connection, issuer))
        except GrantUnreadable:
            return None
        found = loads_object(plain)
        client_id = found.get("client_id") if found is not None else None
        secret = found.get("client_secret") if found is not None else None
        if not isinstance(client_id, str):
            return None
        return Registration(client_id, secret if isinstance(secret, str) else None)

    async def keep(self, connection: str, issuer: str, made: Registration) -> Registration:
        """``made``, kept, or the registration another replica kept first."""
        plain = dumps({"client_id": made.client_id, "client_secret": made.client_secret})
        sealed = self._sealer.seal(plain, _bound(connection, issuer))
        if await self._store.put_new(self._key(connection, issuer), sealed, KEPT_S):
            return made
        return await self.get(connection, issuer) or made

    async def forget(self, connection: str, issuer: str) -> None:
        await self._store.delete([self._key(connection, issuer)])
