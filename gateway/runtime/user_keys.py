"""The keys end-user tokens are verified with (DESIGN.md §18): each identity
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
from urllib.parse import urlsplit

import httpx
import jwt
from starlette.datastructures import Headers

from gateway.config import JwtUsersConfig
from gateway.errors import UserKeysUnavailable
from gateway.policy.users import User, refused, token_of, verify
from gateway.runtime.outbound import Unreached, fetch
from tool_registry import GuardedTransport, loads_object

logger = logging.getLogger("gateway.users")

MAX_KEYS_BYTES = 256 * 1024  # a JWKS or discovery document, at most
MAX_KEYS = 64  # of a JWKS, at most: the rest are not read
FETCH_TIMEOUT_S = 5.0
_PUBLIC = frozenset({"RSA", "EC", "OKP"})  # key types JWTs are signed with; never "oct"


@dataclass(slots=True)
class _Held:
    keys: Mapping[str, jwt.PyJWK] = field(default_factory=dict)
    fetched: float = float("-inf")  # when, by the monotonic clock
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class UserKeys:
    """Every trusted issuer's keys, for every tenant that verifies its users."""

    def __init__(
        self, transport: GuardedTransport, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._transport = transport
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
                    raise UserKeysUnavailable(
                        "User tokens cannot be verified now: the identity provider's keys "
                        "cannot be fetched. Try again shortly."
                    ) from exc
                logger.warning("user keys of %s kept: %s", settings.issuer, exc)
            held.fetched = self._clock()
        return held.keys

    async def _fetch(self, settings: JwtUsersConfig) -> dict[str, jwt.PyJWK]:
        url = settings.jwks_url
        if url is None:
            issuer = settings.issuer.rstrip("/")
            found = await self._document(f"{issuer}/.well-known/openid-configuration")
            if found.get("issuer") != settings.issuer:
                raise ValueError("the discovery document names another issuer")
            url = found.get("jwks_uri")
            if not isinstance(url, str) or _origin(url) != _origin(settings.issuer):
                raise ValueError("the discovery document's jwks_uri is not on the issuer")
        return keys_of(await self._document(url))

    async def _document(self, url: str) -> dict[str, Any]:
        try:
            request = httpx.Request("GET", url, headers={"accept": "application/json"})
        except httpx.InvalidURL as exc:
            raise ValueError(f"{url!r} is not a URL") from exc
        try:
            status, body, cut = await fetch(
                self._transport, request, FETCH_TIMEOUT_S, MAX_KEYS_BYTES
            )
        except Unreached as exc:
            raise ValueError(f"{_origin(url)} could not be reached ({exc})") from exc
        if status != 200 or cut:
            raise ValueError(f"{_origin(url)} answered {status}, or too much")
        found = loads_object(body)
        if found is None:
            raise ValueError(f"{_origin(url)} did not answer with a JSON object")
        return found


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


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, parts.hostname or "", parts.port
