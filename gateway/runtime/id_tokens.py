"""The ID token an OpenID provider's token endpoint answers beside the access token
(OpenID Connect Core §3.1.3.7), held to what it must be before anything in that
answer is kept (docs/design.md §18).

The gateway does not use an ID token: the user a grant belongs to is the one its link
was made for. But an answer whose ID token does not hold is not believed for the rest
either: it is refused, and nothing is stored.

- ``none`` is never an algorithm here (an unsigned token is a forged one), nor is a
  shared-secret one unless the connection has a client secret to check it with (§10.1);
- where the provider's keys are known (its metadata names a ``jwks_uri``) the
  signature must hold under one of them, fetched through the egress guard for each
  answer, so a provider that rotated its keys is read as it is now;
- its issuer must be the provider's (where that is known), its audience must name the
  gateway's client, and it must not have expired;
- where the endpoints were configured by hand (no metadata, no keys), the answer came
  straight from the token endpoint the operator named, which §3.1.3.7 lets stand in
  for the signature; its claims are still held to the client and the clock.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any, get_args

import jwt

from gateway.config import UserTokenAlgorithm
from gateway.policy.users import JwtRefused, key_for, signed_claims, why_not
from gateway.runtime.providers import ProviderClient, ProviderRefused
from tool_registry import immutable

MAX_ID_TOKEN_CHARS = 16_384
LEEWAY_S = 60.0
ASYMMETRIC = frozenset(get_args(UserTokenAlgorithm))
SHARED = frozenset({"HS256", "HS384", "HS512"})


@immutable
class IdToken:
    """An answer's ID token, its header read (not yet believed)."""

    text: str
    header: Mapping[str, Any]

    @property
    def algorithm(self) -> str:
        return str(self.header.get("alg"))

    @property
    def shared(self) -> bool:
        """Signed with a shared secret: checked with the client's, no keys fetched."""
        return self.algorithm in SHARED


def id_token_of(value: object) -> IdToken:
    """An answer's ``id_token``, if it is a JWT signed with an algorithm an ID token may
    be signed with here; refused otherwise (before any key is fetched)."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_ID_TOKEN_CHARS:
        raise ProviderRefused("the ID token is not a JWT of a usable size")
    try:
        header = jwt.get_unverified_header(value)
    except jwt.InvalidTokenError as exc:
        raise ProviderRefused("the ID token is not a JWT") from exc
    algorithm = header.get("alg")
    if isinstance(algorithm, str) and algorithm.lower() == "none":
        raise ProviderRefused("the ID token is unsigned (alg none)")
    if algorithm not in ASYMMETRIC | SHARED:
        raise ProviderRefused("the ID token is signed with an algorithm not accepted")
    return IdToken(value, header)


def check_id_token(
    token: IdToken, client: ProviderClient, keys: Mapping[str, jwt.PyJWK] | None
) -> dict[str, Any]:
    """The claims of an ID token that holds for ``client``; ``ProviderRefused`` for one
    that does not. ``keys``: the provider's published keys, where it has them."""
    algorithm, text = token.algorithm, token.text
    try:
        if token.shared:
            if client.client_secret is None:
                raise JwtRefused("it is signed with a shared secret, and there is none")
            secret = base64.urlsafe_b64encode(client.client_secret.encode()).decode()
            key = jwt.PyJWK({"kty": "oct", "k": secret.rstrip("=")}, algorithm)
            return signed_claims(text, key, algorithm, client.issuer, client.client_id, LEEWAY_S)
        if keys is not None:
            found = key_for(token.header, keys)
            if found is None:
                raise JwtRefused("it names a key its provider does not publish")
            return signed_claims(text, found, algorithm, client.issuer, client.client_id, LEEWAY_S)
        return _claims_unsigned(text, client)
    except JwtRefused as exc:
        raise ProviderRefused(f"the ID token was refused: {exc}") from exc


def _claims_unsigned(token: str, client: ProviderClient) -> dict[str, Any]:
    """The claims of an ID token from a token endpoint configured by hand: the
    signature is not checked (no keys are known), the claims are."""
    try:
        return jwt.decode(
            token,
            options={
                "verify_signature": False,
                "verify_exp": True,
                "verify_aud": True,
                "verify_iss": client.issuer is not None,
                "require": ["exp", "iss", "aud"],
            },
            audience=client.client_id,
            issuer=client.issuer,
            leeway=LEEWAY_S,
        )
    except jwt.ExpiredSignatureError as exc:
        raise JwtRefused("it has expired") from exc
    except jwt.InvalidTokenError as exc:
        raise JwtRefused(why_not(exc)) from exc
