"""Console sessions, kept in the gateway's store so any replica serves them.

A session holds the SHA-256 digest of the key that opened it (never the key), its
CSRF token and when it ends. What the key may see is worked out again on every
page from the configuration in force (``operator_keys.scope_of``): a key taken out of
the configuration ends its sessions at once. The cookie carries a random token; the
store knows it only by its digest.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

from gateway.store.base import Store
from gateway.store.keys import Keys
from tool_registry import dumps, loads_object


@dataclass(frozen=True)
class Session:
    key_digest: bytes
    csrf: str
    expires: float


class ConsoleSessions:
    def __init__(self, store: Store, keys: Keys) -> None:
        self._store = store
        self._keys = keys

    async def open(self, key_digest: bytes, ttl_s: float) -> tuple[str, Session]:
        """A new session for the key of ``key_digest``: its cookie token and itself."""
        token = secrets.token_urlsafe(32)
        session = Session(key_digest, secrets.token_urlsafe(32), time.time() + ttl_s)
        value = {"key": key_digest.hex(), "csrf": session.csrf, "expires": session.expires}
        await self._store.put(self._keys.console_session(token), dumps(value), ttl_s)
        return token, session

    async def find(self, token: str | None) -> Session | None:
        if not token or len(token) > 128:
            return None
        raw = await self._store.get(self._keys.console_session(token))
        said = loads_object(raw) if raw is not None else None
        if said is None:
            return None
        try:
            session = Session(bytes.fromhex(said["key"]), str(said["csrf"]), float(said["expires"]))
        except (KeyError, TypeError, ValueError):
            return None
        return session if session.expires > time.time() else None

    async def close(self, token: str) -> None:
        await self._store.delete([self._keys.console_session(token)])
