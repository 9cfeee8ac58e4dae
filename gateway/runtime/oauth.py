"""An OAuth 2 connection's client side (DESIGN.md §18, RFC 6749 and 7636): the
authorization request a user's browser is sent to (state and PKCE), and the token
endpoint's answers — a code exchanged, a refresh — as ``Grant``s.

Everything a provider answers is hostile: bodies are capped, nothing redirects, a
token of absurd size, an ``expires_in`` that is negative or huge, a token type that is
not a bearer's, or anything not JSON is refused with a reason that names no token.
Every request goes through the egress guard.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx

from gateway.config import OAuth2Connection, TokenExchangeConnection
from gateway.runtime.outbound import Unreached, fetch
from gateway.store.grants import Grant
from tool_registry import GuardedTransport, loads_object

CONNECT_PATH = "/v1/toolgate/connect"  # a link's, under server.public_url
AnyConnection = OAuth2Connection | TokenExchangeConnection
MAX_ANSWER_BYTES = 64 * 1024  # a token endpoint's answer, at most
MAX_TOKEN_CHARS = 8192  # an access or refresh token, at most
MAX_EXPIRES_S = 366 * 86400  # an expires_in past a year is not believed
TIMEOUT_S = 10.0


class ProviderRefused(ValueError):
    """The provider refused, or answered what cannot be a grant; the message says why
    and names no token."""


def pkce_pair() -> tuple[str, str]:
    """A code verifier and its S256 challenge (RFC 7636)."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def authorize_url(
    connection: OAuth2Connection, redirect_uri: str, state: str, challenge: str
) -> str:
    """Where the user's browser goes to grant the connection."""
    params = {
        **connection.params,
        "response_type": "code",
        "client_id": connection.client_id,
        "redirect_uri": redirect_uri,
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    if connection.scopes:
        params["scope"] = " ".join(connection.scopes)
    base = connection.authorize_url
    return f"{base}{'&' if urlsplit(base).query else '?'}{urlencode(params)}"


def _authenticated(connection: AnyConnection, url: str, form: dict[str, str]) -> httpx.Request:
    """A POST of ``form`` to one of the provider's endpoints, as the client: its secret
    in Basic authentication (client_secret_basic: never in a body or URL), or its id
    in the form where it has no secret."""
    headers = {"accept": "application/json"}
    secret = connection.client_secret
    if secret is not None:
        pair = f"{connection.client_id}:{secret.get_secret_value()}".encode()
        headers["authorization"] = f"Basic {base64.b64encode(pair).decode()}"
    else:
        form = {**form, "client_id": connection.client_id}
    return httpx.Request("POST", url, data=form, headers=headers)


class OAuthClient:
    """Talks to connections' token endpoints through the one guarded transport."""

    def __init__(self, transport: GuardedTransport, clock: Callable[[], float] = time.time) -> None:
        self._transport = transport
        self._clock = clock

    async def exchange(
        self, connection: OAuth2Connection, code: str, verifier: str, redirect_uri: str
    ) -> Grant:
        """The grant a code is worth (the authorization code grant, with PKCE)."""
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": verifier,
        }
        return self._grant(connection, await self._token(connection, form), None)

    async def refresh(self, connection: OAuth2Connection, grant: Grant) -> Grant:
        """A refreshed grant (the old refresh token kept if the provider sends none)."""
        if grant.refresh_token is None:
            raise ProviderRefused("the grant has no refresh token")
        form = {"grant_type": "refresh_token", "refresh_token": grant.refresh_token}
        return self._grant(connection, await self._token(connection, form), grant)

    async def exchange_token(
        self, connection: TokenExchangeConnection, subject_token: str
    ) -> Grant:
        """A token for the connection's audience, for the user ``subject_token`` (the
        verified end-user JWT) names: RFC 8693 token exchange."""
        form = {
            "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
            "subject_token": subject_token,
            "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
            "requested_token_type": "urn:ietf:params:oauth:token-type:access_token",
        }
        if connection.audience is not None:
            form["audience"] = connection.audience
        if connection.resource is not None:
            form["resource"] = connection.resource
        if connection.scopes:
            form["scope"] = " ".join(connection.scopes)
        grant = self._grant(connection, await self._token(connection, form), None)
        return replace(grant, refresh_token=None)  # exchanged again, never refreshed

    async def _token(self, connection: AnyConnection, form: dict[str, str]) -> dict[str, Any]:
        request = _authenticated(connection, connection.token_url, form)
        try:
            status, body, cut = await fetch(self._transport, request, TIMEOUT_S, MAX_ANSWER_BYTES)
        except Unreached as exc:
            raise ProviderRefused(f"the token endpoint could not be reached ({exc})") from exc
        found = None if cut else loads_object(body)
        if found is None:
            raise ProviderRefused(f"the token endpoint answered {status}, not a JSON object")
        if status != 200:
            error = found.get("error")
            said = error if isinstance(error, str) and error.isascii() and len(error) < 64 else "?"
            raise ProviderRefused(f"the provider refused ({said})")
        return found

    async def revoke(self, connection: OAuth2Connection, grant: Grant) -> bool:
        """Ask the provider to revoke the grant (RFC 7009: its refresh token, else its
        access token); whether it said yes. Nothing it answers is believed further."""
        if connection.revoke_url is None:
            return False
        token, hint = (
            (grant.refresh_token, "refresh_token")
            if grant.refresh_token is not None
            else (grant.access_token, "access_token")
        )
        form = {"token": token, "token_type_hint": hint}
        request = _authenticated(connection, connection.revoke_url, form)
        try:
            status, _, _ = await fetch(self._transport, request, TIMEOUT_S, MAX_ANSWER_BYTES)
        except Unreached:
            return False
        return status == 200

    def _grant(
        self, connection: AnyConnection, found: Mapping[str, Any], before: Grant | None
    ) -> Grant:
        access, kind = found.get("access_token"), found.get("token_type", "Bearer")
        if not isinstance(access, str) or not 0 < len(access) <= MAX_TOKEN_CHARS:
            raise ProviderRefused("the answer holds no usable access token")
        if not access.isascii() or not access.isprintable():
            raise ProviderRefused("the access token is not printable ASCII")
        if not isinstance(kind, str) or kind.lower() != "bearer":
            raise ProviderRefused("the token is not a bearer token")
        refresh = found.get("refresh_token")
        if refresh is not None and (not isinstance(refresh, str) or len(refresh) > MAX_TOKEN_CHARS):
            raise ProviderRefused("the refresh token is not usable")
        if refresh is None and before is not None:
            refresh = before.refresh_token
        expires_in = found.get("expires_in")
        expires_at = None
        if expires_in is not None:
            if isinstance(expires_in, bool) or not isinstance(expires_in, int | float):
                raise ProviderRefused("expires_in is not a number")
            if not 0 < expires_in <= MAX_EXPIRES_S:
                raise ProviderRefused("expires_in is not a believable lifetime")
            expires_at = self._clock() + float(expires_in)
        scope = found.get("scope")
        if isinstance(scope, str):
            scopes = tuple(scope.split()[:64])
        else:
            scopes = before.scopes if before is not None else connection.scopes
        return Grant(connection.name, access, refresh, expires_at, scopes)
