"""Errors of the gateway, each rendered as OpenAI's error envelope.

::

    GatewayError                     500 server_error
    ├── ConfigError                  the configuration is invalid (load time, no HTTP)
    ├── BadRequest                   400 invalid_request_error
    ├── AuthError                    401 invalid_api_key
    ├── PolicyDenied                 403 model or tool not allowed for the key
    ├── NotFound                     404 unknown model or route
    ├── BodyTimeout                  408 the body did not arrive within server.body_timeout_s
    ├── PayloadTooLarge              413 body over server.max_body_bytes
    ├── ClientClosedRequest          499 the client left before its answer (never sent)
    ├── GuardrailBlocked             400 guardrail_blocked: an input or streamed answer withheld
    ├── ToolLimitExceeded            422 tool_limit_exceeded
    │   └── BudgetExceeded           422 budget_exceeded: the run's envelope is spent
    ├── IdempotencyKeyReused         422 an Idempotency-Key sent again with another body
    ├── RateLimited                  429 rate_limit_exceeded (with Retry-After)
    │   └── QuotaExceeded            429 insufficient_quota: the tenant's budget window
    ├── StoreUnavailable             503 the shared store did not answer (in time)
    ├── Overloaded                   503 large bodies past server.large_bodies_held_bytes
    ├── UserKeysUnavailable          503 the identity provider's keys cannot be had
    ├── RequestTimeout               504 request_timeout_s spent waiting on the upstream
    └── UpstreamError                502 the upstream model server failed
        ├── UpstreamTimeout          504
        └── UpstreamStatusError      the upstream's own 4xx/429, or 502

The status of each is the one the OpenAI SDK maps to the matching exception class.
"""

from __future__ import annotations

from collections.abc import Mapping


class GatewayError(Exception):
    status: int = 500
    type: str = "server_error"
    default_code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int | None = None,
        error_type: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code if code is not None else self.default_code
        if status is not None:
            self.status = status
        if error_type is not None:
            self.type = error_type
        self.headers: dict[str, str] = dict(headers or {})

    def envelope(self) -> dict[str, dict[str, str | None]]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


class ConfigError(GatewayError):
    """The configuration cannot be used; the message names the file, path and reason."""


class BadRequest(GatewayError):
    status = 400
    type = "invalid_request_error"


class AuthError(GatewayError):
    status = 401
    type = "invalid_request_error"
    default_code = "invalid_api_key"


class PolicyDenied(GatewayError):
    status = 403
    type = "permission_error"


class NotFound(GatewayError):
    status = 404
    type = "invalid_request_error"


class BodyTimeout(GatewayError):
    status = 408
    type = "invalid_request_error"
    default_code = "request_body_timeout"


class ClientClosedRequest(GatewayError):
    status = 499
    type = "invalid_request_error"
    default_code = "client_closed_request"


class PayloadTooLarge(GatewayError):
    status = 413
    type = "invalid_request_error"
    default_code = "request_too_large"


class IdempotencyKeyReused(GatewayError):
    status = 422
    type = "invalid_request_error"
    default_code = "idempotency_key_reused"


class GuardrailBlocked(GatewayError):
    """A guardrail withheld the request's input, or its answer while it streamed
    (docs/guardrails.md): its words name the guardrail, never the text."""

    status = 400
    type = "invalid_request_error"
    default_code = "guardrail_blocked"


class ToolLimitExceeded(GatewayError):
    status = 422
    type = "invalid_request_error"
    default_code = "tool_limit_exceeded"


class BudgetExceeded(ToolLimitExceeded):
    """The run's envelope (``max_tokens_per_request``, ``max_cost_usd_per_request``)
    cannot fit its next round."""

    default_code = "budget_exceeded"


class RequestTimeout(GatewayError):
    status = 504
    type = "timeout_error"
    default_code = "request_timeout"


class UpstreamError(GatewayError):
    status = 502
    type = "upstream_error"
    default_code = "upstream_error"


class UpstreamTimeout(UpstreamError):
    status = 504
    type = "timeout_error"
    default_code = "upstream_timeout"


class UpstreamStatusError(UpstreamError):
    """The upstream answered with an error status; ``status`` is what the client gets."""


class RateLimited(GatewayError):
    status = 429
    type = "requests"
    default_code = "rate_limit_exceeded"


class QuotaExceeded(RateLimited):
    """A tenant's budget window (day, month) is spent: OpenAI's own words for it."""

    type = "insufficient_quota"
    default_code = "insufficient_quota"


class StoreUnavailable(GatewayError):
    """The store did not answer (in time); ``store.on_error`` decides what follows."""

    status = 503
    type = "server_error"
    default_code = "store_unavailable"


class UserKeysUnavailable(GatewayError):
    """A user token cannot be verified now: its issuer's keys (JWKS) cannot be fetched
    and none are kept. Not the client's fault: it may retry."""

    status = 503
    type = "server_error"
    default_code = "user_keys_unavailable"


class Overloaded(GatewayError):
    """The process holds as many large request bodies as it may; the client retries."""

    status = 503
    type = "server_error"
    default_code = "server_overloaded"


def expected(exc: BaseException) -> bool:
    """Whether ``exc`` is one the gateway answers as a value (one of its own errors, or
    a cancellation), not a fault to log with its traceback."""
    return isinstance(exc, GatewayError) or not isinstance(exc, Exception)


def settle(exc: BaseException) -> None:
    """Forget where ``exc`` and the errors behind it (their causes and contexts) were
    raised, once it has been logged and answered: past that point an error is a value.

    A traceback holds every frame it passed through, and each frame every local of
    it — a request's body and its decoded history among them — while the error is held
    by something those frames hold (a run's report, the request's exchange): a cycle
    that only the collector frees, which the serving process's thresholds make rare
    (``ops/gc_tuning.py``). Cutting the tracebacks lets the request's objects go as
    soon as the request does. The frames themselves are not touched."""
    pending: list[BaseException] = [exc]
    seen: set[int] = set()
    while pending:
        error = pending.pop()
        if id(error) in seen:
            continue
        seen.add(id(error))
        error.__traceback__ = None
        for behind in (error.__cause__, error.__context__):
            if behind is not None:
                pending.append(behind)
        if isinstance(error, BaseExceptionGroup):
            pending.extend(error.exceptions)
