"""Which requests keep their write results, and under what identity (docs/design.md §16).

A request is *the same request again* when it carries the same ``Idempotency-Key``
(any client; per tenant and caller), or when a stock OpenAI SDK retries it by itself:
``x-stainless-retry-count`` (sent by the Python and Node SDKs on every attempt, 0 on
the first) with the same body bytes from the same caller. Its write calls' results
are kept under that identity; a retry gets the kept result of the same call (tool and
canonical arguments) instead of calling the tool again.

- With an ``Idempotency-Key`` every attempt looks for kept results and claims each
  write before making it, so two attempts at once never both make it.
- An SDK's first attempt (``x-stainless-retry-count: 0``) only keeps: the same body
  sent on purpose twice (a user asking again) runs again. Its retries (≥ 1) look.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.config import IdempotencyConfig
from gateway.digits import whole
from gateway.errors import BadRequest
from gateway.store.kept_writes import WriteScope

KEY_HEADER = "idempotency-key"
RETRY_HEADER = "x-stainless-retry-count"
MAX_KEY_CHARS = 255


def write_scope(
    headers: Mapping[str, str],
    tenant: str,
    owner: str,
    raw: bytes,
    config: IdempotencyConfig,
) -> WriteScope | None:
    """The request's write scope, or None when it has none (its writes are not kept,
    and a failure after one tells the SDK not to retry)."""
    if not config.enabled:
        return None
    key = headers.get(KEY_HEADER)
    if key is not None:
        if not 1 <= len(key) <= MAX_KEY_CHARS or not key.isprintable():
            raise BadRequest(
                f"The Idempotency-Key header must be 1 to {MAX_KEY_CHARS} printable characters.",
                param=KEY_HEADER,
            )
        return WriteScope(f"{tenant}\0{owner}\0key\0{key}", raw, True, True, config.ttl_s)
    count = headers.get(RETRY_HEADER)
    retries = whole(count, max_digits=6)
    if retries is None:
        return None
    retry = retries >= 1
    return WriteScope(f"{tenant}\0{owner}\0sdk", raw, False, retry, config.sdk_retry_ttl_s)
