"""Every tenant's budgets, for one app (docs/design.md §13): a ``RunBudget`` for each request
that runs the loop (or, on the /mcp endpoint, only tools), and for a request passed
through a check at the door and a charge once its usage is known."""

from __future__ import annotations

import logging

from gateway.config import ModelPrice, OnStoreError
from gateway.errors import StoreUnavailable
from gateway.ops.metrics import Metrics
from gateway.policy.limits import LoopLimits
from gateway.policy.models import ModelRoute
from gateway.policy.prices import Rates, read_usage
from gateway.policy.run_budget import DEFAULT_ROUND_OUTPUT, RunBudget, quota_error, window_limits
from gateway.policy.tenants import Tenant
from gateway.store.base import Granted, Spend
from gateway.store.budget_counters import BudgetStore, TenantWindow
from gateway.values import UsageCounts

logger = logging.getLogger("gateway.budget")


class Budgets:
    """Every tenant's budgets, for one app: a ``RunBudget`` per request that runs the
    loop; for a request passed through, a check at the door and a charge after."""

    def __init__(
        self,
        store: BudgetStore,
        on_store_error: OnStoreError = "allow",
        metrics: Metrics | None = None,
    ) -> None:
        self.store = store
        self._on_store_error = on_store_error
        self._metrics = metrics

    def run(self, tenant: Tenant, route: ModelRoute, limits: LoopLimits) -> RunBudget | None:
        """The budget of one run, if anything is counted (the request's own narrowing
        may be all there is)."""
        envelope = (
            limits.max_tokens_per_request is not None or limits.max_cost_usd_per_request is not None
        )
        if not (envelope or tenant.budget is not None or route.model.price is not None):
            return None
        windows = self.store.windows(tenant.id, window_limits(tenant.budget))
        return RunBudget(
            limits,
            Rates.of(route.model.price),
            tenant.id,
            windows,
            self.store,
            round_output_tokens=route.model.max_output_tokens or DEFAULT_ROUND_OUTPUT,
            on_store_error=self._on_store_error,
            metrics=self._metrics,
        )

    def for_tools(self, tenant: Tenant, limits: LoopLimits) -> RunBudget | None:
        """The budget of tool calls made without a model (the /mcp endpoint): priced
        calls are paid from the tenant's cost limits like a loop's."""
        if tenant.budget is None and limits.max_cost_usd_per_request is None:
            return None
        windows = self.store.windows(tenant.id, window_limits(tenant.budget))
        return RunBudget(
            limits,
            Rates(),
            tenant.id,
            windows,
            self.store,
            on_store_error=self._on_store_error,
            metrics=self._metrics,
        )

    async def admit(self, tenant: Tenant) -> list[TenantWindow]:
        """A request passed through may go only while the tenant's windows have
        something left (429 ``insufficient_quota`` otherwise): the windows, to charge."""
        windows = self.store.windows(tenant.id, window_limits(tenant.budget))
        if not any(window.limited for window in windows):
            return windows
        try:
            used = await self.store.used(windows)
        except StoreUnavailable as exc:
            if self._on_store_error == "deny":
                raise StoreUnavailable(
                    "Budgets cannot be checked right now; try again shortly.",
                    headers={"retry-after": "1"},
                ) from exc
            return windows
        for index, (window, (tokens, nanos)) in enumerate(zip(windows, used, strict=True)):
            limit = window.window
            spent = (limit.tokens is not None and tokens >= limit.tokens) or (
                limit.nanos is not None and nanos >= limit.nanos
            )
            if spent:
                granted = Granted(False, 0, tuple(used), index)
                raise quota_error(windows, granted, self.store.clock())
        return windows

    async def charge(
        self,
        tenant: Tenant,
        route: ModelRoute,
        windows: list[TenantWindow],
        usage: UsageCounts | None,
    ) -> int:
        """Charge a request passed through with its usage, after the fact: its cost in
        nano-USD (none counted when the upstream reported no believable usage)."""
        counts = read_usage(usage)
        if counts is None:
            return 0
        nanos = counts.nanos(Rates.of(route.model.price))
        if windows:
            try:
                await self.store.spend(windows, Spend(counts.total, nanos))
            except StoreUnavailable:
                logger.warning("budget of tenant %s not charged: store unavailable", tenant.id)
        return nanos


def unpriced_models(tenants: list[Tenant], models: dict[str, ModelPrice | None]) -> list[str]:
    """Where a tenant's cost limit cannot count: a model it may use has no price (for
    ``toolgate check``)."""
    found = []
    for tenant in tenants:
        budget, limits = tenant.budget, tenant.limits
        by_cost = limits.max_cost_usd_per_request is not None or (
            budget is not None
            and (budget.cost_usd_per_day is not None or budget.cost_usd_per_month is not None)
        )
        if not by_cost:
            continue
        free = sorted(name for name in tenant.models if models.get(name) is None)
        if free:
            found.append(
                f"tenant {tenant.id!r} has a cost limit, but {', '.join(map(repr, free))} "
                "has no price: its rounds cost nothing there (models[].price)"
            )
    return found
