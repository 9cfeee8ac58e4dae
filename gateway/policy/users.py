"""Who the user is (docs/design.md §18): an end-user token — a JWT from the application's
identity provider — verified against the provider's keys, whose ``claim`` (``sub``)
names the user within the tenant.

Pure: ``verify`` takes the token, the keys (``runtime/user_keys.py`` fetches them) and
the tenant's settings, and answers with the ``User`` or refuses (401). Everything in a
token is hostile: it is read only after its signature holds, only with an algorithm
the tenant allows (never ``none``, never a shared secret), and a token of absurd size is
refused before it is parsed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

import jwt
from starlette.datastructures import Headers

from gateway.config import AssertedUsersConfig, JwtUsersConfig
from gateway.errors import AuthError, BadRequest
from tool_registry import immutable

MAX_TOKEN_CHARS = 16_384  # a JWT longer than this is refused unread
MAX_USER_CHARS = 256  # of the claim that names the user
INVALID = "invalid_user_token"


@immutable
class User:
    """A verified end user: who (the claim's value), by which issuer, and the token
    that says so (never shown: a token-exchange connection exchanges it)."""

    id: str
    issuer: str
    token: str = field(default="", repr=False, compare=False)


def asserted(headers: Headers, settings: AssertedUsersConfig) -> User | None:
    """The user a tenant's key asserts in its header (believed as the key is), or None
    when there is none and none is required; a 401 when one is, a 400 for two or for a
    value no user id can be."""
    value = _one(headers, settings.header, "user")
    if value is None:
        if settings.required:
            raise AuthError(
                f"This tenant's requests name their user: send it in {settings.header!r}.",
                code="user_required",
            )
        return None
    if not 0 < len(value) <= MAX_USER_CHARS or not value.isprintable():
        raise BadRequest(
            f"The header {settings.header!r} is not a user id (1 to {MAX_USER_CHARS} "
            "printable characters).",
            code="invalid_user",
        )
    return User(value, issuer="asserted")


def _one(headers: Headers, name: str, what: str) -> str | None:
    """The one value of header ``name`` (stripped), or None; two are a 400."""
    given = headers.getlist(name)
    if len(given) > 1:
        raise BadRequest(
            f"The header {name!r} is sent {len(given)} times; send one {what}.",
            code="duplicate_header",
        )
    return str(given[0]).strip() if given else None


def refused(why: str) -> AuthError:
    return AuthError(f"The user token was refused: {why}.", code=INVALID)


def token_of(headers: Headers, settings: JwtUsersConfig) -> str | None:
    """The end-user token a request carries in the tenant's header (``Bearer`` or
    bare); None for none. Sent twice is a 400: one token names one user."""
    value = _one(headers, settings.header, "user token")
    if value is None:
        return None
    scheme, _, rest = value.partition(" ")
    return rest.strip() if scheme.lower() == "bearer" else value


def verify(
    token: str,
    keys: Mapping[str, jwt.PyJWK],
    settings: JwtUsersConfig,
) -> User | None:
    """The user ``token`` names, once its signature, issuer, audience and times hold;
    None when it names a key that ``keys`` does not hold (they may have rotated)."""
    if not token or len(token) > MAX_TOKEN_CHARS:
        raise refused("it is empty or too large")
    try:
        header = jwt.get_unverified_header(token)
    except jwt.InvalidTokenError as exc:
        raise refused("it is not a JWT") from exc
    algorithm = header.get("alg")
    if algorithm not in settings.algorithms:
        shown = algorithm if isinstance(algorithm, str) and len(algorithm) <= 16 else "?"
        raise refused(f"it is signed with {shown!r}, which this tenant does not accept")
    try:
        key = key_for(header, keys)
        if key is None:
            return None
        claims = signed_claims(
            token, key, algorithm, settings.issuer, settings.audience, settings.leeway_s
        )
    except JwtRefused as exc:
        raise refused(str(exc)) from exc
    user = claims.get(settings.claim)
    if not isinstance(user, str) or not user or len(user) > MAX_USER_CHARS:
        raise refused(f"its {settings.claim!r} claim does not name a user")
    return User(user, settings.issuer, token)


class JwtRefused(ValueError):
    """A JWT does not hold; the message says why in words that name nothing of it."""


def key_for(header: Mapping[str, Any], keys: Mapping[str, jwt.PyJWK]) -> jwt.PyJWK | None:
    """The key of ``keys`` a JWT's header names and whose kind fits its algorithm;
    None when it names one ``keys`` does not hold (they may have rotated)."""
    kid = header.get("kid")
    if isinstance(kid, str) and kid:
        key = keys.get(kid)
    elif len(keys) == 1:  # a provider with one key may name none
        key = next(iter(keys.values()))
    else:
        raise JwtRefused("it names no key, and the issuer has several")
    if key is not None and not _fits(key, str(header.get("alg"))):
        raise JwtRefused("its key is not for its algorithm")
    return key


def signed_claims(
    token: str,
    key: jwt.PyJWK,
    algorithm: str,
    issuer: str | None,
    audience: str,
    leeway_s: float,
) -> dict[str, Any]:
    """A JWT's claims once its signature by ``key`` with ``algorithm`` holds, and its
    issuer (where one is given), audience and times (``exp`` required)."""
    try:
        return jwt.decode(
            token,
            key.key,
            algorithms=[algorithm],
            audience=audience,
            issuer=issuer,
            leeway=leeway_s,
            options={"require": ["exp", "iss", "aud"]},
        )
    except jwt.ExpiredSignatureError as exc:
        raise JwtRefused("it has expired") from exc
    except jwt.InvalidTokenError as exc:
        raise JwtRefused(why_not(exc)) from exc


# The algorithms each kind of public key signs with.
_FAMILIES = {"RSA": ("RS", "PS"), "EC": ("ES",), "OKP": ("EdDSA",)}


def _fits(key: jwt.PyJWK, algorithm: str) -> bool:
    """Whether ``key`` may verify ``algorithm``: the one its JWK names, if it names
    one; else one of its kind's."""
    named = key._jwk_data.get("alg")
    if isinstance(named, str):
        return named == algorithm
    return algorithm.startswith(_FAMILIES.get(str(key.key_type), ()))


def why_not(exc: jwt.InvalidTokenError) -> str:
    """What went wrong, in words that say nothing of the token itself."""
    if isinstance(exc, jwt.InvalidAudienceError):
        return "it is not for this audience"
    if isinstance(exc, jwt.InvalidIssuerError):
        return "it is from another issuer"
    if isinstance(exc, jwt.ImmatureSignatureError):
        return "it is not valid yet"
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return f"it lacks the {exc.claim!r} claim"
    if isinstance(exc, jwt.InvalidSignatureError):
        return "its signature does not hold"
    return "it cannot be read"
