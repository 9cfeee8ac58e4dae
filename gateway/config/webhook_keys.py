"""What the gateway sends an operator's service (the approval webhook, an HTTP
guardrail) is addressed and signed alike: an http(s) URL, a Standard Webhooks secret.
The rules of both, for the configuration's validators. Part of the configuration's base."""

from __future__ import annotations

import base64

from pydantic import SecretStr

WEBHOOK_SECRET_PREFIX = "whsec_"


def webhook_key(secret: str) -> bytes:
    """The HMAC key of a Standard Webhooks secret (``whsec_<base64 of 24 to 64 random
    bytes>``); ``ValueError`` saying what is wrong if it is not one."""
    if not secret.startswith(WEBHOOK_SECRET_PREFIX):
        raise ValueError(f"must start with {WEBHOOK_SECRET_PREFIX!r} (a Standard Webhooks secret)")
    try:
        key = base64.b64decode(secret[len(WEBHOOK_SECRET_PREFIX) :], validate=True)
    except ValueError as exc:
        raise ValueError(f"the part after {WEBHOOK_SECRET_PREFIX!r} must be base64") from exc
    if not 24 <= len(key) <= 64:
        raise ValueError("must hold 24 to 64 random bytes, base64-encoded")
    return key


def service_url(url: str | None) -> str | None:
    """``url`` if it is one an operator's service may have (``ValueError`` else)."""
    if url is not None and not url.startswith(("http://", "https://")):
        raise ValueError("must be an http:// or https:// URL")
    return url


def signing_secret(secret: SecretStr | None) -> SecretStr | None:
    """``secret`` if it is a Standard Webhooks secret (its words never quote it)."""
    if secret is not None:
        webhook_key(secret.get_secret_value())
    return secret
