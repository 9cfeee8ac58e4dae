"""The runtime snapshot (docs/design.md §12): everything a request reads from the
configuration, built in one go and never changed. A request reads the gateway's
current snapshot once and uses it to the end; a reload or a changed tool list builds
a new one and swaps it in, so a request never sees half of each."""

from __future__ import annotations

from collections.abc import Iterable

from gateway.config import GatewayConfig
from gateway.errors import ConfigError
from gateway.policy.models import ModelRouter
from gateway.policy.tenants import TenantDirectory
from gateway.policy.tool_search import Catalogs
from gateway.runtime.loader import check_references
from tool_registry import Tool, ToolConfigError, ToolRegistry, immutable


@immutable(eq=False)
class Runtime:
    config: GatewayConfig
    registry: ToolRegistry
    tenants: TenantDirectory
    models: ModelRouter
    warnings: tuple[str, ...] = ()  # what was left out or is suspect, for the log
    # Tool search's index, when some tenant may have its tools searched (docs/design.md §17).
    catalogs: Catalogs | None = None

    @classmethod
    def build(
        cls,
        config: GatewayConfig,
        tools: Iterable[Tool],
        discovered: Iterable[Tool] = (),
        warnings: Iterable[str] = (),
    ) -> Runtime:
        """``tools`` come from the configuration: a duplicate name or invalid schema is a
        ``ConfigError``. ``discovered`` tools (MCP servers) that clash or are invalid are
        left out with a warning: a server's list must not take the gateway down.
        Blocking (it indexes the tools where a tenant may have them searched): once the
        event loop runs, build it off it."""
        try:
            registry = ToolRegistry(tools, discovered=discovered)
        except ToolConfigError as exc:
            raise ConfigError(str(exc)) from exc
        problems = check_references(config, registry.names)
        if problems:
            raise ConfigError("; ".join(problems))
        # Patterns left to sources read at run time that still match nothing.
        unmatched = [
            f"tenants[{i}].tools[{j}]: {pattern!r} matches no tool (yet)"
            for i, tenant in enumerate(config.tenants or [])
            for j, pattern in enumerate(tenant.tools)
            if not registry.match(pattern)
        ]
        tenants = TenantDirectory(config, registry.names)
        searching = [tenant for tenant in tenants.all() if tenant.searches]
        catalogs = Catalogs.build(registry) if searching else None
        if catalogs is not None:  # each tenant's catalog made here, not by its first request
            for tenant in searching:
                catalogs.of(tenant.tools, tenant.tool_search, frozenset())
        return cls(
            config,
            registry,
            tenants,
            ModelRouter(config),
            (*warnings, *registry.problems, *unmatched),
            catalogs,
        )
