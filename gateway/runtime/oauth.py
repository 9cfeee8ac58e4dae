"""An OAuth 2 connection's client side (docs/design.md §18, RFC 6749 and 7636): the
authorization request a user's browser is sent to (state and PKCE, and the resource
indicator where the connection has one), and the token endpoint's answers — a code
exchanged, a refresh, a token exchange (RFC 8693) — as ``Grant``s. Where the
endpoints are and who the gateway is there is a ``ProviderClient`` (``providers.py``).

Everything a provider answers is hostile: bodies are capped, nothing redirects, a
token of absurd size, an ``expires_in`` that is negative or huge, a token type that is
not a bearer's, an ID token that does not hold (``id_tokens.py``: unsigned, another
client's, expired, or not signed by the provider's keys), or anything not JSON is
refused with a reason that names no token, and nothing of it is kept. Every request
goes through the egress guard.
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

from gateway.config import TokenExchangeConnection
from gateway.runtime.discovery import Discovery, DiscoveryFailed, DiscoveryUnreached
from gateway.runtime.id_tokens import check_id_token, id_token_of
from gateway.runtime.outbound import Unreached, fetch
from gateway.runtime.providers import ProviderClient, ProviderRefused, ProviderUnreachable
from gateway.runtime.user_keys import keys_of
from gateway.store.grants import Grant
from gateway.values import CONNECT_PATH
from tool_registry import GuardedTransport, loads_object

CALLBACK_PATH = f"{CONNECT_PATH}/callback"  # the providers' redirect URI, under it too
TOKEN_TYPE = "urn:ietf:params:oauth:token-type:"  # RFC 8693 §3
MAX_ANSWER_BYTES = 64 * 1024  # a token endpoint's answer, at most
MAX_TOKEN_CHARS = 8192  # an access or refresh token, at most
MAX_EXPIRES_S = 366 * 86400  # an expires_in past a year is not believed
TIMEOUT_S = 10.0


def callback_url(public_url: str) -> str:
    """The redirect URI the gateway registers with providers."""
    return public_url.rstrip("/") + CALLBACK_PATH


def pkce_pair() -> tuple[str, str]:
    """A code verifier and its S256 challenge (RFC 7636)."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def nonce_of(verifier: str) -> str:
    """The OpenID Connect ``nonce`` of a round trip: derived from its PKCE verifier (a
    secret the gateway keeps with the round trip, never sent before the code is
    exchanged), so it needs no keeping of its own, and no one but the gateway can make
    it; another value than the verifier's challenge."""
    digest = hashlib.sha256(b"toolgate-oidc-nonce:" + verifier.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def authorize_url(
    client: ProviderClient, redirect_uri: str, state: str, challenge: str, nonce: str
) -> str:
    """Where the user's browser goes to grant the connection. ``nonce`` goes with it (an
    OpenID provider binds its ID token to it; a plain OAuth server ignores it)."""
    params = {
        **dict(client.params),
        "response_type": "code",
        "client_id": client.client_id,
        "redirect_uri": redirect_uri,
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "nonce": nonce,
    }
    if client.scopes:
        params["scope"] = " ".join(client.scopes)
    if client.resource is not None:
        params["resource"] = client.resource
    base = client.authorize_url
    return f"{base}{'&' if urlsplit(base).query else '?'}{urlencode(params)}"


def _authenticated(client: ProviderClient, url: str, form: dict[str, str]) -> httpx.Request:
    """A POST of ``form`` to one of the provider's endpoints, as the client: its secret
    in Basic authentication (client_secret_basic: never in a body or URL), or its id
    in the form where it has no secret."""
    headers = {"accept": "application/json"}
    if client.client_secret is not None:
        pair = f"{client.client_id}:{client.client_secret}".encode()
        headers["authorization"] = f"Basic {base64.b64encode(pair).decode()}"
    else:
        form = {**form, "client_id": client.client_id}
    return httpx.Request("POST", url, data=form, headers=headers)


def exchange_client(connection: TokenExchangeConnection) -> ProviderClient:
    """A token exchange connection as a ``ProviderClient`` (it has no authorization endpoint)."""
    secret = connection.client_secret
    return ProviderClient(
        connection=connection.name,
        authorize_url="",
        token_url=connection.token_url,
        client_id=connection.client_id,
        client_secret=secret.get_secret_value() if secret is not None else None,
        scopes=connection.scopes,
        resource=connection.resource,
    )


class OAuthClient:
    """Talks to connections' token endpoints through the one guarded transport."""

    def __init__(
        self,
        transport: GuardedTransport,
        discovery: Discovery,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._transport = transport
        self._discovery = discovery  # a provider's keys, for the ID tokens it answers
        self._clock = clock

    async def exchange(
        self,
        client: ProviderClient,
        code: str,
        verifier: str,
        redirect_uri: str,
        subject: tuple[str, str] | None = None,
    ) -> Grant:
        """The grant a code is worth (the authorization code grant, with PKCE).
        ``subject``: a claim and the value the answer's ID token must hold for it, where
        the provider also names the users (who signed in there must be the user the
        link was made for); an answer without one, or with another, is refused."""
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": verifier,
        }
        found, claims = await self._token(client, form)
        if claims is not None and claims.get("nonce") != nonce_of(verifier):
            # OpenID Connect Core §3.1.3.7: the nonce sent must come back in the ID token
            raise ProviderRefused("the ID token does not hold this sign-in's nonce")
        if subject is not None:
            claim, expected = subject
            if claims is None:
                raise ProviderRefused(
                    "the provider also names this tenant's users, and its answer holds no "
                    "ID token to tell who signed in (the connection must ask for 'openid')"
                )
            if claims.get(claim) != expected:
                raise ProviderRefused(
                    "the account that signed in at the provider is not the user the link "
                    "was made for"
                )
        return self._grant(client, found, None)

    async def refresh(self, client: ProviderClient, grant: Grant) -> Grant:
        """A refreshed grant (the old refresh token kept if the provider sends none)."""
        if grant.refresh_token is None:
            raise ProviderRefused("the grant has no refresh token")
        form = {"grant_type": "refresh_token", "refresh_token": grant.refresh_token}
        found, _ = await self._token(client, form)
        return self._grant(client, found, grant)

    async def exchange_token(
        self, connection: TokenExchangeConnection, subject_token: str
    ) -> Grant:
        """A token for the connection's audience, for the user ``subject_token`` (the
        verified end-user JWT) names: RFC 8693 token exchange."""
        form = {
            "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
            "subject_token": subject_token,
            "subject_token_type": TOKEN_TYPE + connection.subject_token_type,
            "requested_token_type": TOKEN_TYPE + "access_token",
        }
        if connection.audience is not None:
            form["audience"] = connection.audience
        if connection.scopes:
            form["scope"] = " ".join(connection.scopes)
        client = exchange_client(connection)
        found, _ = await self._token(client, form)
        grant = self._grant(client, found, None)
        return replace(grant, refresh_token=None)  # exchanged again, never refreshed

    async def _token(
        self, client: ProviderClient, form: dict[str, str]
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The token endpoint's answer, and the claims of the ID token in it (None: it
        has none), once that token holds."""
        if client.resource is not None:
            form = {**form, "resource": client.resource}
        request = _authenticated(client, client.token_url, form)
        try:
            got = await fetch(self._transport, request, TIMEOUT_S, MAX_ANSWER_BYTES)
        except Unreached as exc:
            raise ProviderUnreachable(f"the token endpoint could not be reached ({exc})") from exc
        found = None if got.cut else loads_object(got.body)
        if found is None:
            raise ProviderRefused(f"the token endpoint answered {got.status}, not a JSON object")
        if got.status != 200:
            error = found.get("error")
            said = error if isinstance(error, str) and error.isascii() and len(error) < 64 else "?"
            raise ProviderRefused(f"the provider refused ({said})")
        if "id_token" not in found:
            return found, None
        return found, await self._hold_id_token(client, found["id_token"])

    async def _hold_id_token(self, client: ProviderClient, value: object) -> dict[str, Any]:
        """The claims of the answer's ID token, or the answer refused if it does not hold
        (``id_tokens.py``); the provider's keys are fetched only for a token signed as
        they sign."""
        token = id_token_of(value)
        keys = None
        if not token.shared and client.jwks_uri:
            try:
                keys = keys_of(await self._discovery.document(client.jwks_uri))
            except DiscoveryUnreached as exc:
                raise ProviderUnreachable(f"the provider's keys ({exc})") from exc
            except (DiscoveryFailed, ValueError) as exc:
                raise ProviderRefused(f"the provider's keys: {exc}") from exc
        return check_id_token(token, client, keys)

    async def revoke(self, client: ProviderClient, grant: Grant) -> bool:
        """Ask the provider to revoke the grant (RFC 7009: its refresh token, else its
        access token); whether it said yes. Nothing it answers is believed further."""
        if client.revoke_url is None:
            return False
        token, hint = (
            (grant.refresh_token, "refresh_token")
            if grant.refresh_token is not None
            else (grant.access_token, "access_token")
        )
        form = {"token": token, "token_type_hint": hint}
        request = _authenticated(client, client.revoke_url, form)
        try:
            got = await fetch(self._transport, request, TIMEOUT_S, MAX_ANSWER_BYTES)
        except Unreached:
            return False
        return got.status == 200

    def _grant(
        self, client: ProviderClient, found: Mapping[str, Any], before: Grant | None
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
            scopes = before.scopes if before is not None else client.scopes
        return Grant(client.connection, access, refresh, expires_at, scopes)
