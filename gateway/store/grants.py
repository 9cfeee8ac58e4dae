"""Users' grants (docs/design.md §18): the tokens a user's connections hold, kept in the
store so any replica uses them, sealed at rest.

A ``Grant`` is a value whose tokens never show in its ``repr``. ``Sealer`` seals one
with AES-256-GCM (``cryptography``) under the first configured key and names that
key's id beside it; any configured key opens it, so a key is rotated by listing a new
one first: a grant opened with an older key is sealed again with the newest when it is
read. The tenant, the user and the connection are the cipher's associated data: a
sealed grant moved to another user, tenant or connection does not open.

``GrantStore`` keeps a user's grants in one map per user (listed without a token in
sight), and lets one replica at a time refresh a grant (``refreshing``): a rotated
refresh token used twice is a revoked grant at most providers.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import field
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from gateway.config import GrantsConfig
from gateway.store.base import Store
from gateway.store.keys import Keys
from tool_registry import dumps, immutable, loads_object

logger = logging.getLogger("gateway.grants")

VERSION = 1
_NONCE = 12  # bytes: AES-GCM's


@immutable
class Grant:
    """What a user granted a connection: its tokens (never shown), when the access
    token expires (epoch seconds), and the scopes granted."""

    connection: str
    access_token: str = field(repr=False)
    refresh_token: str | None = field(default=None, repr=False)
    expires_at: float | None = None
    scopes: tuple[str, ...] = ()
    token_type: str = "Bearer"

    def public(self) -> dict[str, Any]:
        """As a user's application may see it: never a token."""
        return {
            "connection": self.connection,
            "scopes": list(self.scopes),
            "expires_at": self.expires_at,
        }

    def expired(self, now: float, margin_s: float = 0.0) -> bool:
        return self.expires_at is not None and self.expires_at - margin_s <= now


def _encoded(grant: Grant) -> bytes:
    return dumps(
        {
            "access_token": grant.access_token,
            "refresh_token": grant.refresh_token,
            "expires_at": grant.expires_at,
            "scopes": list(grant.scopes),
            "token_type": grant.token_type,
        }
    )


def _decoded(connection: str, plain: bytes) -> Grant | None:
    found = loads_object(plain)
    if found is None or not isinstance(found.get("access_token"), str):
        return None
    refresh, expires = found.get("refresh_token"), found.get("expires_at")
    scopes = found.get("scopes")
    return Grant(
        connection,
        found["access_token"],
        refresh if isinstance(refresh, str) else None,
        float(expires) if isinstance(expires, int | float) else None,
        tuple(s for s in scopes if isinstance(s, str)) if isinstance(scopes, list) else (),
        str(found.get("token_type") or "Bearer"),
    )


class GrantUnreadable(ValueError):
    """A sealed grant that does not open: no key of its id, or it was altered or moved."""


class Sealer:
    """AES-256-GCM under named keys: the first seals, each opens what names it."""

    def __init__(self, keys: Sequence[tuple[str, bytes]]) -> None:
        if not keys:
            raise ValueError("a sealer needs a key")
        self._newest = keys[0][0]
        self._ciphers = {kid: AESGCM(key) for kid, key in keys}
        self._checks = {kid: key_check(key) for kid, key in keys}

    @classmethod
    def of(cls, config: GrantsConfig) -> Sealer:
        return cls([(k.id, base64.b64decode(k.key.get_secret_value())) for k in config.keys])

    def seal(self, plain: bytes, bound: bytes) -> bytes:
        nonce = os.urandom(_NONCE)
        sealed = self._ciphers[self._newest].encrypt(nonce, plain, bound)
        text = base64.b64encode(nonce + sealed).decode()
        check = self._checks[self._newest]
        return dumps({"v": VERSION, "kid": self._newest, "check": check, "sealed": text})

    def open(self, stored: bytes, bound: bytes) -> tuple[bytes, bool]:
        """The plain bytes, and whether they were sealed under an older key."""
        found = loads_object(stored)
        if found is None or found.get("v") != VERSION:
            raise GrantUnreadable("not a sealed grant of a version this gateway reads")
        kid, text = found.get("kid"), found.get("sealed")
        if not isinstance(kid, str) or kid not in self._ciphers or not isinstance(text, str):
            raise GrantUnreadable(f"sealed under a key not configured ({str(kid)[:32]!r})")
        cipher = self._ciphers[kid]
        try:
            raw = base64.b64decode(text, validate=True)
            plain = cipher.decrypt(raw[:_NONCE], raw[_NONCE:], bound)
        except (ValueError, InvalidTag) as exc:
            check = found.get("check")
            if isinstance(check, str) and check != self._checks[kid]:
                raise GrantUnreadable(
                    f"sealed under another key of the id {kid[:32]!r}: the configured "
                    "key of that id is not the one it was sealed with (were its bytes "
                    "replaced? give a new key a new id, listed first)"
                ) from exc
            raise GrantUnreadable(
                "altered, or sealed for another user or connection"
                if isinstance(check, str)
                else f"did not open under the key {kid[:32]!r}: that key's bytes changed, "
                "or the grant was altered or moved"
            ) from exc
        return plain, kid != self._newest


def key_check(key: bytes) -> str:
    """A key's check value, kept beside what it sealed: tells a replaced key from an
    altered grant, and says nothing of the key (a digest of it, cut short)."""
    return hashlib.sha256(b"toolgate-grant-key-check\0" + key).hexdigest()[:16]


def _bound(tenant: str, user: str, connection: str) -> bytes:
    """What a sealed grant is bound to: opened anywhere else, it does not open."""
    return "\0".join(("toolgate-grant", tenant, user, connection)).encode()


class GrantStore:
    """Users' grants in the store, sealed; a user's listed without their tokens."""

    def __init__(
        self,
        store: Store,
        keys: Keys,
        config: GrantsConfig,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._keys = keys
        self._sealer = Sealer.of(config)
        self._ttl_s = config.ttl_s
        self._lock_s = config.refresh_lock_s
        self._clock = clock

    def _key(self, tenant: str, user: str) -> str:
        digest = hashlib.sha256(user.encode()).hexdigest()[:32]  # no user id in a key name
        return f"{self._keys.prefix}t:{tenant}:grants:{digest}"

    async def put(self, tenant: str, user: str, grant: Grant) -> None:
        sealed = self._sealer.seal(_encoded(grant), _bound(tenant, user, grant.connection))
        await self._store.field_put(self._key(tenant, user), grant.connection, sealed, self._ttl_s)

    async def get(self, tenant: str, user: str, connection: str) -> Grant | None:
        """The user's grant for ``connection``, or None: never made, forgotten, or one
        that does not open (logged: a key left out of the configuration, say)."""
        stored = (await self._store.fields(self._key(tenant, user))).get(connection)
        return await self._opened(tenant, user, connection, stored)

    async def all(self, tenant: str, user: str) -> list[Grant]:
        """Every grant of the user that opens, by connection name."""
        stored = await self._store.fields(self._key(tenant, user))
        found = [await self._opened(tenant, user, name, value) for name, value in stored.items()]
        return sorted((g for g in found if g is not None), key=lambda g: g.connection)

    async def forget(self, tenant: str, user: str, connection: str) -> None:
        await self._store.field_delete(self._key(tenant, user), connection)

    async def _opened(
        self, tenant: str, user: str, connection: str, stored: bytes | None
    ) -> Grant | None:
        if stored is None:
            return None
        try:
            plain, older = self._sealer.open(stored, _bound(tenant, user, connection))
        except GrantUnreadable as exc:
            logger.warning("a grant of tenant %s (%s) is not read: %s", tenant, connection, exc)
            return None
        grant = _decoded(connection, plain)
        if grant is not None and older:  # a rotated key: sealed again under the newest
            await self.put(tenant, user, grant)
        return grant

    async def refreshed(
        self,
        tenant: str,
        user: str,
        grant: Grant,
        refresh: Callable[[Grant], Awaitable[Grant]],
        poll_s: float = 0.05,
    ) -> Grant | None:
        """The grant after one refresh, made by one caller on one replica at a time:
        the others wait for it and read what it kept. None when the grant is gone (the
        refresh failed and forgot it, or it was revoked meanwhile)."""
        lock = f"{self._key(tenant, user)}:refresh:{grant.connection}"
        holder = os.urandom(16).hex().encode()  # released by this holder only
        deadline = self._clock() + self._lock_s
        while True:
            if await self._store.put_new(lock, holder, self._lock_s):
                try:
                    current = await self.get(tenant, user, grant.connection)
                    if current is None or current.access_token != grant.access_token:
                        return current  # refreshed (or revoked) while this one waited
                    fresh = await refresh(current)
                    await self.put(tenant, user, fresh)
                    return fresh
                finally:  # a refresh that outlived the lock leaves the next holder's
                    await self._store.delete_if(lock, holder)
            current = await self.get(tenant, user, grant.connection)
            if current is None or current.access_token != grant.access_token:
                return current
            if self._clock() > deadline:
                return None  # the other refresh neither finished nor let go
            await asyncio.sleep(poll_s)
