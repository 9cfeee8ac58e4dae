"""Keeping configured secrets out of everything the gateway sends (docs/design.md §4).

``secrets_of`` lists what the configuration holds that is a credential: upstream keys
and headers, tenant keys, the metrics token, the store's password, the tools' headers,
URL passwords and fixed query values, the trace collector's headers.
``RedactionMiddleware`` replaces them in every response body the gateway sends —
answers, errors, event streams, pass-through bytes, traces — so no path (an upstream
quoting its key in an error, a tool echoing its headers) can carry one out. Tool
results are redacted before the model reads them (the executor), and log lines before
they are written (``JsonFormatter``).

``forget_links`` keeps connect links out of everything kept (docs/security.md, "A
connect link is its user's"): a link's ticket is a credential of the user it was made
for, so what the store keeps (traces, recordings, stored responses, conversations,
saved turns, kept writes), log lines and spans say that a link was given, never which.
"""

from __future__ import annotations

import base64

import re2
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.config import GatewayConfig
from gateway.values import CONNECT_PATH
from tool_registry import PUBLIC_HEADERS, HttpSpec, Redactor, url_secrets

LINK_GIVEN = "[connect link given]"
# A link with its ticket (``secrets.token_urlsafe``; "callback" is too short to be one),
# with the scheme and host before it where they are written. RE2: linear in the text.
_LINK_PATTERN = rf"(?:https?://[^\s\"'<>\\]*)?{CONNECT_PATH}/[A-Za-z0-9_-]{{16,}}"
_LINK_TEXT = re2.compile(_LINK_PATTERN)
_LINK_BYTES = re2.compile(_LINK_PATTERN.encode())
_LINK_MARK = CONNECT_PATH.encode() + b"/"


def forget_links(data: bytes) -> bytes:
    """``data`` with every connect link replaced by ``[connect link given]``; the very
    object when it holds none (one substring search, nearly always)."""
    if _LINK_MARK not in data:
        return data
    forgotten: bytes = _LINK_BYTES.sub(LINK_GIVEN.encode(), data)
    return forgotten


def forget_links_text(text: str) -> str:
    """``forget_links`` of a text."""
    if CONNECT_PATH + "/" not in text:
        return text
    forgotten: str = _LINK_TEXT.sub(LINK_GIVEN, text)
    return forgotten


def secrets_of(config: GatewayConfig) -> list[str]:
    """Every text of the configuration that may be a credential, in one list that every
    sink reads (``redactor_of``: responses, log lines, spans, tool results, recordings):
    each ``SecretStr`` field's value (``tests/gateway/ops/test_redaction.py`` walks the
    models and fails for one missing here), the headers sent with requests but for a few
    descriptive ones, and the password and query values of every configured URL."""
    found: list[str] = []
    for upstream in config.upstreams:
        if upstream.api_key is not None:
            found.append(upstream.api_key.get_secret_value())
        found += upstream.headers.values()
        found += url_secrets(upstream.base_url)
    for tenant in config.tenants or []:
        found += [key.get_secret_value() for key in tenant.keys]
        users = tenant.users
        if users is not None and users.jwt is not None:
            found += url_secrets(users.jwt.issuer) + url_secrets(users.jwt.jwks_url or "")
    for token in (config.server.metrics_token, config.server.admin_key):
        if token is not None:
            found.append(token.get_secret_value())
    found += url_secrets(config.store.url)
    found += config.otel.headers.values()
    for tool in config.tools:
        found += tool.http.secrets()
    for source in config.openapi:
        for secret in source.auth.values():
            value = secret.get_secret_value()
            found += [value, base64.b64encode(value.encode()).decode()]  # as HTTP Basic
        found += [v for k, v in source.headers.items() if k.lower() not in PUBLIC_HEADERS]
        found += url_secrets(source.spec) + url_secrets(source.base_url or "")
    for server in config.mcp:
        found += HttpSpec(url=server.url, headers=server.headers).secrets()
    approvals = [config.policy.approvals]
    approvals += [t.policy.approvals for t in config.tenants or [] if t.policy.approvals]
    for said in approvals:
        found += [named.key.get_secret_value() for named in said.admin_keys]
        if said.webhook_secret is not None:
            found.append(said.webhook_secret.get_secret_value())
        found += url_secrets(said.webhook) if said.webhook else []
    guarding = [config.policy.guardrails]
    guarding += [t.policy.guardrails for t in config.tenants or [] if t.policy.guardrails]
    for rules in guarding:
        for rule in rules.rules:
            if rule.secret is not None:
                found.append(rule.secret.get_secret_value())
            found += url_secrets(rule.url) if rule.url else []
    found += _connection_secrets(config)
    return [secret for secret in found if secret]


def _connection_secrets(config: GatewayConfig) -> list[str]:
    """Users' connections (docs/design.md §18): each client secret (and the HTTP Basic
    credentials it is sent in), the grants' sealing keys, and their endpoints' URLs'."""
    found: list[str] = []
    for connection in config.connections:
        secret = connection.client_secret
        if secret is not None:
            value = secret.get_secret_value()
            pair = f"{connection.client_id}:{value}".encode()
            found += [value, base64.b64encode(pair).decode()]
        urls = [getattr(connection, name, None) for name in _CONNECTION_URLS]
        found += [text for url in urls if isinstance(url, str) for text in url_secrets(url)]
    if config.grants is not None:
        found += [key.key.get_secret_value() for key in config.grants.keys]
    return found


_CONNECTION_URLS = ("issuer", "authorize_url", "token_url", "revoke_url", "url", "resource")


def redactor_of(config: GatewayConfig) -> Redactor:
    return Redactor(secrets_of(config))


def _head(start: Message, redactor: Redactor, length: int | None) -> Message:
    """The response's start with header values redacted (an upstream's ``retry-after``
    or ``content-type`` is passed on) and ``content-length`` set to ``length`` (none for
    a streamed body, ``length=None``)."""
    headers = [(k, redactor.data(v)) for k, v in start["headers"] if k != b"content-length"]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    return {**start, "headers": headers}


class RedactionMiddleware:
    """Redacts every HTTP response's header values and body. A whole body (one message)
    is redacted at once and its ``content-length`` set again; a streamed body is
    redacted as it goes, a possible secret's start held back until the next chunk
    settles it."""

    def __init__(self, app: ASGIApp, redactor: Redactor) -> None:
        self.app = app
        self.redactor = redactor

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        redactor = self.redactor
        if scope["type"] != "http" or not redactor:  # no secrets (yet: a reload may add some)
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        stream = None

        async def redacting_send(message: Message) -> None:
            nonlocal start, stream
            kind = message["type"]
            if kind == "http.response.start":
                start = message
                return
            if kind != "http.response.body":
                await send(message)
                return
            body = message.get("body", b"")
            more = message.get("more_body", False)
            if start is not None:
                head, start = start, None
                if not more and stream is None:
                    # One search over all of it: nearly always there is nothing to do.
                    values = [value for _, value in head["headers"]]
                    if not redactor.found(b"\0".join([body, *values])):
                        await send(head)
                        await send(message)
                        return
                    body = redactor.data(body)
                    await send(_head(head, redactor, len(body)))
                    await send({**message, "body": body})
                    return
                await send(_head(head, redactor, None))
                stream = redactor.stream()
            assert stream is not None
            body = stream.feed(body) if body else b""
            if not more:
                body += stream.flush()
            if body or not more:
                await send({"type": kind, "body": body, "more_body": more})

        await self.app(scope, receive, redacting_send)
