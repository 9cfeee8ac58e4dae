"""The keys end-user tokens are verified with (docs/design.md §18): each identity
provider's JWKS, fetched through the egress guard, kept ``jwks_ttl_s``, and fetched
again when a token names a key they do not hold (a provider rotated its keys) — at
most once per ``min_refresh_s``, one fetch at a time, whatever many requests ask.

Where the keys are: ``jwks_url``, or the issuer's discovery document (its ``issuer``
must be the one configured, and its ``jwks_uri`` on the issuer's own origin: a
document that points elsewhere is refused). Everything fetched is hostile: bodies are
capped, redirects are not followed, only public keys of the kinds JWTs are signed with
are kept (never a shared secret), and a fetch that fails keeps the keys already held.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jwt
from starlette.datastructures import Headers

from gateway.config import JwtUsersConfig
from gateway.errors import UserKeysUnavailable
from gateway.policy.users import User, refused, token_of, verify
from gateway.runtime.discovery import Discovery, DiscoveryFailed

logger = logging.getLogger("gateway.users")
SAY_EVERY_S = 60.0  # why an issuer's keys cannot be had, logged at most this often

MAX_KEYS = 64  # of a JWKS, at most: the rest are not read
_PUBLIC = frozenset({"RSA", "EC", "OKP"})  # key types JWTs are signed with; never "oct"


@dataclass(slots=True)
class _Held:
    keys: Mapping[str, jwt.PyJWK] = field(default_factory=dict)
    fetched: float = float("-inf")  # when, by the monotonic clock
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    said: float = float("-inf")  # when why they cannot be had was last logged


class UserKeys:
    """Every trusted issuer's keys, for every tenant that verifies its users."""

    def __init__(self, discovery: Discovery, clock: Callable[[], float] = time.monotonic) -> None:
        self._discovery = discovery  # documents fetched through the egress guard
        self._clock = clock
        self._held: dict[tuple[str, str | None], _Held] = {}

    async def user(self, headers: Headers, settings: JwtUsersConfig) -> User | None:
        """The verified user a request names, or None when it carries no token and
        the tenant does not require one (a 401 when it does, or the token fails)."""
        token = token_of(headers, settings)
        if token is None:
            if settings.required:
                raise refused(f"none was sent (in {settings.header})")
            return None
        user = verify(token, await self._keys(settings, again=False), settings)
        if user is None:  # a key not held: the provider may have rotated its keys
            user = verify(token, await self._keys(settings, again=True), settings)
        if user is None:
            raise refused("it names a key its issuer does not publish")
        return user

    async def _keys(self, settings: JwtUsersConfig, again: bool) -> Mapping[str, jwt.PyJWK]:
        held = self._held.setdefault((settings.issuer, settings.jwks_url), _Held())
        age = self._clock() - held.fetched
        if age < (settings.min_refresh_s if again else settings.jwks_ttl_s):
            return held.keys
        async with held.lock:
            age = self._clock() - held.fetched
            if age < (settings.min_refresh_s if again else settings.jwks_ttl_s):
                return held.keys  # fetched while this one waited
            try:
                held.keys = await self._fetch(settings)
            except (UserKeysUnavailable, ValueError) as exc:
                if not held.keys:
                    self._say_why(held, settings, exc)
                    raise UserKeysUnavailable(
                        "User tokens cannot be verified now: the identity provider's keys "
                        "cannot be fetched. Try again shortly."
                    ) from exc
                logger.warning("user keys of %s kept: %s", settings.issuer, exc)
            held.fetched = self._clock()
        return held.keys

    async def probe(self, settings: JwtUsersConfig) -> int:
        """How many signing keys the issuer publishes now (``ValueError`` or
        ``UserKeysUnavailable`` saying why none can be had): ``toolgate check --probe``."""
        return len(await self._fetch(settings))

    def _say_why(self, held: _Held, settings: JwtUsersConfig, exc: Exception) -> None:
        """Why no user token can be verified, logged for the operator (once a minute per
        issuer: every request meets it), with what to change where it is the
        configuration's doing."""
        now = self._clock()
        if now - held.said < SAY_EVERY_S:
            return
        held.said = now
        hint = slash_hint(settings)
        logger.warning(
            "user tokens of issuer %s cannot be verified: %s%s",
            settings.issuer,
            exc,
            f" ({hint})" if hint else "",
        )

    async def _fetch(self, settings: JwtUsersConfig) -> dict[str, jwt.PyJWK]:
        url = settings.jwks_url
        if url is None:  # the issuer's discovery document names it, on its own origin
            try:
                server = await self._discovery.server(settings.issuer, openid=True)
            except DiscoveryFailed as exc:
                raise ValueError(str(exc)) from exc
            if server.jwks_uri is None:
                raise ValueError("the discovery document names no jwks_uri")
            url = server.jwks_uri
        try:
            return keys_of(await self._discovery.document(url))
        except DiscoveryFailed as exc:
            raise ValueError(f"the JWKS: {exc}") from exc


def slash_hint(settings: JwtUsersConfig) -> str:
    """What to change when the configured issuer is the likely cause of its keys'
    absence (a trailing slash: an issuer is compared exactly), else ""."""
    if settings.issuer.endswith("/") and settings.jwks_url is None:
        return (
            "users.jwt.issuer ends with '/': an issuer is compared exactly, and most "
            "providers' have none; write it as their discovery document does"
        )
    return ""


def keys_of(document: Mapping[str, Any]) -> dict[str, jwt.PyJWK]:
    """A JWKS's usable public keys by their ``kid`` (one key may have none)."""
    listed = document.get("keys")
    if not isinstance(listed, list):
        raise ValueError("the JWKS has no keys")
    keys: dict[str, jwt.PyJWK] = {}
    for entry in listed[:MAX_KEYS]:
        if not isinstance(entry, dict) or entry.get("kty") not in _PUBLIC:
            continue
        if entry.get("use", "sig") != "sig" or "d" in entry:  # a private key: never kept
            continue
        try:
            key = jwt.PyJWK(entry)
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
            continue
        kid = entry.get("kid")
        keys[kid if isinstance(kid, str) else ""] = key
    if not keys:
        raise ValueError("the JWKS has no usable public key")
    return keys
