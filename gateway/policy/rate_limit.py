"""Per-tenant rate limits (docs/design.md §3): requests and tokens per minute, decided in the
store so every replica sees the same counters."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

from gateway.config import OnStoreError
from gateway.errors import RateLimited
from gateway.ops.metrics import Metrics
from gateway.policy.tenants import Tenant
from gateway.store import GuardedStore, Keys, RateDecision, RateMode, StoreUnavailable
from gateway.store.memory import MemoryStore

logger = logging.getLogger("gateway.rate_limit")

MINUTE_S = 60.0


def duration(seconds: float) -> str:
    """OpenAI's form of a reset time: ``20ms``, ``1.5s``, ``6m0s``."""
    if seconds < 1:
        return f"{max(0, math.ceil(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60)
    text = f"{round(rest, 3):g}s"
    return f"{int(minutes)}m{text}" if minutes else text


def _headers(kind: str, decision: RateDecision) -> dict[str, str]:
    return {
        f"x-ratelimit-limit-{kind}": str(decision.limit),
        f"x-ratelimit-remaining-{kind}": str(decision.remaining),
        f"x-ratelimit-reset-{kind}": duration(decision.reset_s),
    }


@dataclass(slots=True)
class Admission:
    """What the limiter decided for one request: the headers its response carries."""

    headers: dict[str, str] = field(default_factory=dict)
    metered: bool = False  # the tenant has a token limit: charge its usage afterwards


class RateLimiter:
    def __init__(
        self,
        store: GuardedStore,
        keys: Keys,
        on_error: OnStoreError,
        metrics: Metrics | None = None,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._keys = keys
        self._on_error = on_error
        self._local = MemoryStore(max_bytes=1024 * 1024)  # the pages' budget, store down
        self.store_errors = 0
        self.refused = 0

    async def admit(self, tenant: Tenant) -> Admission:
        """Take one request from the tenant's budget, or raise ``RateLimited`` (429).

        A tenant already over its token budget is refused at the door; tokens are
        charged after the request (``charge``). With the store down, ``on_error``
        decides: ``allow`` serves without limits, ``deny`` answers 503.
        """
        rpm, tpm = tenant.limits.requests_per_minute, tenant.limits.tokens_per_minute
        if rpm is None and tpm is None:
            return Admission()
        admission = Admission(metered=tpm is not None)
        # Tokens first: a request refused for its tokens takes no request slot.
        checks: list[tuple[str, int | None, RateMode]] = [
            ("tokens", tpm, "peek"),
            ("requests", rpm, "acquire"),
        ]
        try:
            for kind, limit, mode in checks:
                if limit is None:
                    continue
                key = self._keys.rate(tenant.id, kind)
                decision = await self._store.rate(key, limit, MINUTE_S, 1, mode)
                admission.headers |= _headers(kind, decision)
                if not decision.allowed:
                    raise self._refusal(tenant, kind, decision, admission)
        except StoreUnavailable as exc:
            self.store_errors += 1
            if self._on_error == "deny":
                raise StoreUnavailable(
                    "Rate limits cannot be checked right now; try again shortly.",
                    headers={"retry-after": "1"},
                ) from exc
            return Admission()
        return admission

    def _refusal(
        self, tenant: Tenant, kind: str, decision: RateDecision, admission: Admission
    ) -> RateLimited:
        self.refused += 1
        if self._metrics is not None:
            self._metrics.rate_limited.labels(tenant.id, kind).inc()
        wait = max(decision.retry_after_s, 0.001)
        headers = {
            **admission.headers,
            "retry-after": str(math.ceil(wait)),
            "retry-after-ms": str(math.ceil(wait * 1000)),
        }
        per = "requests" if kind == "requests" else "tokens"
        return RateLimited(
            f"Rate limit reached for {per} per minute: limit {decision.limit}. "
            f"Try again in {duration(wait)}.",
            error_type=kind,
            headers=headers,
        )

    async def admit_browser(
        self, address: str, per_minute: int, pages: str = "connect"
    ) -> float | None:
        """Take one visit of a page of ``pages`` (the keyless connect pages, the
        console's) from ``address``'s budget: None when it fits, else the seconds until
        it would. While the store does not answer, the budget is counted in this
        process's memory: the pages are open to anyone, and stay limited."""
        key = self._keys.browser_rate(address, pages)
        try:
            decision = await self._store.rate(key, per_minute, MINUTE_S, 1, "acquire")
        except StoreUnavailable:
            self.store_errors += 1
            decision = await self._local.rate(key, per_minute, MINUTE_S, 1, "acquire")
        if decision.allowed:
            return None
        self.refused += 1
        return max(decision.retry_after_s, 0.001)

    async def charge(self, tenant: Tenant, usage: object) -> None:
        """Charge a finished request's tokens; a store failure here is logged, not raised."""
        tpm = tenant.limits.tokens_per_minute
        tokens = _total_tokens(usage)
        if tpm is None or tokens <= 0:
            return
        try:
            await self._store.rate(
                self._keys.rate(tenant.id, "tokens"), tpm, MINUTE_S, tokens, "charge"
            )
        except StoreUnavailable:
            self.store_errors += 1
            logger.warning("tokens of tenant %s not charged: store unavailable", tenant.id)


def _total_tokens(usage: object) -> int:
    if not isinstance(usage, dict):
        return 0
    total = usage.get("total_tokens")
    if isinstance(total, int):
        return total
    parts = [usage.get("prompt_tokens"), usage.get("completion_tokens")]
    return sum(p for p in parts if isinstance(p, int))
