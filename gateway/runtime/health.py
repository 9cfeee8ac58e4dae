"""What an operator is told of the gateway's health (docs/design.md §19): the probe's words
for each model server, tool origin and remote source (``probe.py``), kept for
``KEPT_S`` so that pages do not probe on every view, one probe at a time; and what
``toolgate check`` finds in the configuration in force (``findings``), the same words
the command prints."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from gateway.config import GatewayConfig
from gateway.policy.budgets import unpriced_models
from gateway.policy.rules import unmatched_rules
from gateway.runtime.probe import Probe
from gateway.runtime.snapshot import Runtime
from tool_registry import immutable

KEPT_S = 30.0


@immutable
class Checked:
    probes: tuple[Probe, ...]
    at: float  # when (wall clock)


class Health:
    def __init__(
        self, probe: Callable[[], Awaitable[list[Probe]]], clock: Callable[[], float] = time.time
    ) -> None:
        self._probe = probe
        self._clock = clock
        self._last: Checked | None = None
        self._lock = asyncio.Lock()

    async def checked(self, again: bool = False) -> Checked:
        """The last probe if it is fresh (and ``again`` is not asked), else a new one."""
        async with self._lock:
            last = self._last
            if last is not None and not again and self._clock() - last.at < KEPT_S:
                return last
            self._last = Checked(tuple(await self._probe()), self._clock())
            return self._last


def findings(config: GatewayConfig, runtime: Runtime, every_tool_known: bool = True) -> list[str]:
    """What ``toolgate check`` warns of in a configuration: its load's warnings, rules
    that name no tool (only where ``every_tool_known``: remote sources read), and
    tenants whose models have no price while they have a budget."""
    found = list(runtime.warnings)
    if every_tool_known:
        tenant_rules = [(t.id, t.policy) for t in config.tenants or []]
        found += unmatched_rules(config.policy, tenant_rules, list(runtime.registry))
    prices = {model.name: model.price for model in config.models}
    found += unpriced_models(runtime.tenants.all(), prices)
    found += users_missing(runtime)
    if config.console.enabled and not signs_in(runtime):
        found.append(
            "console.enabled: no key can sign in to the console: set server.admin_key (every "
            "tenant) or a tenant's policy.approvals.admin_keys (its approvals and runs)"
        )
    return found


def users_missing(runtime: Runtime) -> list[str]:
    """Tenants that may use a tool acting as the user (``auth.connection``) and have no
    ``users`` section: no request of theirs names a user, so every such call fails."""
    found = []
    for tenant in runtime.tenants.all():
        if tenant.users is not None:
            continue
        acting = sorted(
            name
            for name in tenant.tools
            if (tool := runtime.registry.get(name)) is not None and tool.connection is not None
        )
        if acting:
            shown = ", ".join(acting[:5]) + (
                f" and {len(acting) - 5} more" if len(acting) > 5 else ""
            )
            found.append(
                f"tenant {tenant.id!r}: its tools {shown} act as the user (auth.connection), "
                "and it has no users section: every call of theirs will fail; set "
                "tenants[].users (docs/security.md)"
            )
    return found


def signs_in(runtime: Runtime) -> bool:
    """Whether some operator's key can sign in to the console (docs/design.md §19)."""
    if runtime.config.server.admin_key is not None:
        return True
    return any(tenant.policy.approvals.admin_keys for tenant in runtime.tenants.all())
