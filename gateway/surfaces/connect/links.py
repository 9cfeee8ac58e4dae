"""Connecting a user's service (docs/design.md §18), in three steps:

1. the user's application asks for a link (``POST /v1/toolgate/connections/{name}/link``,
   with the tenant's key and the user's verified token): a short-lived, single-use
   ticket bound to tenant, user and connection;
2. the user opens it in a browser, without any key (``GET /v1/toolgate/connect/{ticket}``):
   the ticket is used up and the browser is sent to the provider, with ``state`` and a
   PKCE challenge;
3. the provider sends the browser back (``GET /v1/toolgate/connect/callback``): the
   state is used up, the code exchanged for the user's grant, which is kept sealed,
   and a page says the user can return to the chat.

The pages are the gateway's own: everything on them is escaped, nothing is loaded from
anywhere, they may not be framed, cached or send a referrer. A replayed link or
callback, a forged or expired ticket, a provider's error or an answer that cannot be a
grant shows a page that says so, and nothing is kept.
"""

from __future__ import annotations

import hashlib
import html
import logging
import math
import secrets
import time
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from gateway.config import McpConnection, OAuth2Connection
from gateway.errors import BadRequest, GatewayError, NotFound
from gateway.runtime.oauth import authorize_url, callback_url, nonce_of, pkce_pair
from gateway.runtime.providers import (
    ConsentConnection,
    ProviderRefused,
    same_issuer,
    subject_to_hold,
    with_openid,
)
from gateway.store.consent import STATE_TTL_S, Consent
from gateway.surfaces.head import Admission
from gateway.surfaces.http import Exchange, json_response, page_headers, page_words
from gateway.values import CONNECT_PATH

if TYPE_CHECKING:
    from gateway.runtime.services import Gateway

logger = logging.getLogger("gateway.connect")

_PAGE_HEADERS = {
    "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "frame-ancestors 'none'; form-action 'none'; base-uri 'none'",
    "cache-control": "no-store",
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
}


def _cookie(state: str) -> str:
    """The cookie that binds a round trip to the browser that began it (one per round
    trip: two begun in one browser do not undo each other)."""
    return "toolgate_connect_" + hashlib.sha256(state.encode()).hexdigest()[:16]


def page(title: str, text: str, status: int = 200) -> HTMLResponse:
    """A small page of the gateway's own, every word escaped."""
    body = (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;max-width:32em;margin:4em auto}</style>"
        f"</head><body><h1>{html.escape(title)}</h1><p>{html.escape(text)}</p></body></html>"
    )
    return HTMLResponse(body, status, headers=_PAGE_HEADERS)


def error_page(request: Request, exc: GatewayError, request_id: str) -> Response:
    """The boundary's rendering of what a connect page raised: a page of its own
    (``page_words``), never a traceback."""
    answer = page(*page_words(exc, request_id), exc.status)
    for name, value in page_headers(exc).items():
        answer.headers.setdefault(name, value)
    return answer


def _title(connection: ConsentConnection) -> str:
    return connection.display_name or connection.name


# What a provider's ``error`` (RFC 6749 §4.1.2.1, OpenID Connect Core §3.1.2.6) means
# for the person who was sent there, and what they can do.
_PROVIDER_SAID = {
    "access_denied": "You chose not to allow it (or the sign-in was cancelled), so "
    "nothing was connected. If you meant to allow it, go back to the chat and ask "
    "again: it will give you a new link.",
    "login_required": "You were not signed in there. Go back to the chat and ask again "
    "for a new link, and sign in when {title} asks.",
    "consent_required": "{title} needs you to allow it, and could not ask. Go back to "
    "the chat and ask again for a new link.",
    "interaction_required": "{title} needs you to do something there first. Go back to "
    "the chat and ask again for a new link.",
    "temporarily_unavailable": "{title} is busy or down for a moment. Wait a few "
    "minutes, then go back to the chat and ask again for a new link.",
    "server_error": "{title} failed on its side. Wait a few minutes, then go back to "
    "the chat and ask again for a new link.",
}
_SET_UP_WRONG = (
    "{title} refused how this service asked ({error}): nothing was connected, and "
    "asking again will not help. Tell the people who run this service; they can fix "
    "it in its settings at {title}."
)


def described_error(description: str) -> str:
    """A provider's ``error_description``, as a page and a log line may show it: its
    printable characters, at most 200 (the page escapes it; the provider is a far side,
    its words are shown as its, never as instructions)."""
    kept = "".join(c for c in description if c.isprintable())
    return kept[:200].strip()


def provider_words(title: str, error: str) -> str:
    """What the provider's ``error`` tells the user, in words they can act on: a
    refusal they chose, one to wait out, or a setting for the operator to fix."""
    said = _PROVIDER_SAID.get(error)
    if said is not None:
        return said.format(title=title)
    if not error:
        return (
            f"{title} sent you back without an answer, so nothing was connected. Go "
            "back to the chat and ask again for a new link."
        )
    shown = "".join(c for c in error if c.isalnum() or c in "_-.")[:64]
    return _SET_UP_WRONG.format(title=title, error=shown or "unknown error")


class Connect:
    def __init__(self, gateway: Gateway, admit: Admission) -> None:
        self._gateway = gateway
        self._admit = admit

    def _connection(self, name: str) -> ConsentConnection | None:
        """The consent-flow connection of ``name`` (a token exchange needs none)."""
        for connection in self._gateway.runtime.config.connections:
            if connection.name == name and isinstance(connection, OAuth2Connection | McpConnection):
                return connection
        return None

    def _callback_url(self) -> str:
        public = self._gateway.runtime.config.server.public_url
        assert public is not None  # the configuration holds one wherever connections are
        return callback_url(public)

    async def link(self, request: Request, exchange: Exchange) -> Response:
        """Step 1: a link for the verified user to connect ``name``."""
        _, tenant, _ = await self._admit(request, exchange)
        name = request.path_params["name"]
        if self._connection(name) is None:
            raise NotFound(f"No connection {name[:64]!r} is configured.")
        if exchange.user is None:
            raise BadRequest(
                "Connections belong to a user: send the user's token (or id) "
                "(the tenant's users settings name the header).",
                code="user_required",
            )
        ticket = await self._gateway.consents.ticket(Consent(tenant.id, exchange.user, name))
        public = self._gateway.runtime.config.server.public_url or ""
        return json_response(
            {
                "object": "toolgate.connect_link",
                "connection": name,
                "url": f"{public.rstrip('/')}{CONNECT_PATH}/{ticket}",
                "expires_at": int(time.time() + self._gateway.consents.ticket_ttl_s),
            }
        )

    async def _too_many(self, request: Request) -> Response | None:
        """A page saying to wait, for a browser address past ``pages_per_minute``."""
        grants = self._gateway.runtime.config.grants
        if grants is None:
            return None
        address = request.client.host if request.client is not None else "-"
        wait = await self._gateway.limiter.admit_browser(address, grants.pages_per_minute)
        if wait is None:
            return None
        refused = page(
            "Too many attempts",
            "This browser opened too many connection pages in a short time. Wait a "
            "minute, then open a new link from the application.",
            429,
        )
        refused.headers["retry-after"] = str(math.ceil(wait))
        return refused

    async def start(self, request: Request, exchange: Exchange) -> Response:
        """Step 2: a link opened in a browser."""
        refused = await self._too_many(request)
        if refused is not None:
            return refused
        consent = await self._gateway.consents.take_ticket(request.path_params["ticket"])
        connection = self._connection(consent.connection) if consent is not None else None
        if consent is None or connection is None:
            return page(
                "This link does not work",
                "It has expired, was used already, or never was. Ask the application "
                "for a new one.",
                404,
            )
        try:
            client = await self._gateway.providers.client(connection, self._callback_url())
        except ProviderRefused as exc:
            logger.warning("connection %s cannot start: %s", connection.name, exc)
            return page(
                f"{_title(connection)} cannot be connected now",
                f"{_title(connection)} cannot be reached or did not answer as it should. "
                "Nothing was connected. Try again later: go back to the chat and ask "
                "again, and it will give you a new link. If it keeps happening, tell "
                "the people who run this service.",
                502,
            )
        tenant = self._gateway.runtime.tenants.find(consent.tenant)
        users = tenant.users if tenant is not None else None
        if subject_to_hold(users, client, consent.user) is not None:
            # The provider also names the tenant's users: who signs in must be the
            # link's user, which its answer's ID token tells (so ``openid`` is asked).
            client = with_openid(client)
        verifier, challenge = pkce_pair()
        browser = secrets.token_urlsafe(32)  # the round trip ends in this browser only
        state = await self._gateway.consents.begin(consent, verifier, browser)
        target = authorize_url(client, self._callback_url(), state, challenge, nonce_of(verifier))
        redirect = RedirectResponse(target, 302, headers=_PAGE_HEADERS)
        redirect.set_cookie(
            _cookie(state),
            browser,
            max_age=int(STATE_TTL_S),
            path=CONNECT_PATH,
            secure=self._callback_url().startswith("https://"),
            httponly=True,
            samesite="lax",  # sent on the provider's redirect back, a top-level GET
        )
        return redirect

    async def callback(self, request: Request, exchange: Exchange) -> Response:
        """Step 3: the provider sent the browser back (the round trip's cookie is
        dropped, whatever the outcome)."""
        refused = await self._too_many(request)
        if refused is not None:
            return refused
        answer = await self._finish(request)
        state = request.query_params.get("state", "")
        answer.delete_cookie(_cookie(state), path=CONNECT_PATH)
        return answer

    async def _finish(self, request: Request) -> Response:
        query = request.query_params
        state, code = query.get("state", ""), query.get("code")
        found = await self._gateway.consents.finish(state, request.cookies.get(_cookie(state)))
        if found is None:
            return page(
                "This sign-in cannot be finished",
                "It has expired, was finished already, or did not start in this browser. "
                "Open a new link from the application.",
                400,
            )
        consent, verifier = found
        connection = self._connection(consent.connection)
        tenant = self._gateway.runtime.tenants.find(consent.tenant)
        if connection is None or tenant is None:
            return page("This connection is gone", "The gateway no longer offers it.", 404)
        title = f"{_title(connection)} is not connected"
        if code is None or not 0 < len(code) <= 4096:
            error = query.get("error", "")[:64]
            described = described_error(query.get("error_description", ""))
            logger.info(
                "connection %s not made: the provider said %r (%s)",
                connection.name,
                error,
                described or "no description",
            )
            words = provider_words(_title(connection), error)
            if described:
                words += f" The provider said: “{described}”."
            return page(title, words, 400)
        grants = self._gateway.grants
        assert grants is not None  # the configuration holds grants wherever connections are
        try:
            client = await self._gateway.providers.client(connection, self._callback_url())
            if not same_issuer(client, query.get("iss")):  # RFC 9207: a mix-up
                raise ProviderRefused("the callback names another issuer")
            subject = subject_to_hold(tenant.users, client, consent.user)
            grant = await self._gateway.oauth.exchange(
                client, code, verifier, self._callback_url(), subject
            )
        except ProviderRefused as exc:
            logger.warning("connection %s not made: %s", connection.name, exc)
            return page(
                title,
                f"{_title(connection)} answered, but not with what it should have, so "
                "nothing was connected. Go back to the chat and ask again for a new "
                "link; if it keeps happening, tell the people who run this service "
                f"(what went wrong: {exc}).",
                502,
            )
        await grants.put(consent.tenant, consent.user, grant)
        return page(
            f"{_title(connection)} is connected",
            "You can close this page, go back to the chat and ask again: what needed "
            f"{_title(connection)} can be done now.",
        )
