"""What an operator sees of the configuration as it runs (docs/design.md §19: JSON first, the
console's pages stand on these): ``GET /v1/toolgate/tenants`` — each tenant's models,
tools, limits, budget (what it has spent today and this month, and what is left),
policy and keys (as digest prefixes) — and ``GET /v1/toolgate/tools?tenant=ID&q=`` —
the tenant's tools as the policy point sees them (source, effects, trust of the output,
approval, price per call, result cache), with their schemas, found by ``q`` as tool
search finds them. An admin key sees every tenant; an approvals key its own
(``tenant`` may then be left out). Names, descriptions and schemas are the tools' own
words, hostile as any: JSON carries them, a page must escape them. ``GET
/v1/toolgate/configuration`` (the admin key's) sums up the configuration in force."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response

from gateway.config import AssertedUsersConfig
from gateway.errors import BadRequest, NotFound
from gateway.policy.tenants import Tenant
from gateway.policy.tool_search import Catalogs
from gateway.runtime.health import findings
from gateway.surfaces.http import Exchange, json_response
from gateway.surfaces.operator.keys import operator_admitted
from gateway.surfaces.operator.usage import usage_rows
from tool_registry import FIT

if TYPE_CHECKING:
    from gateway.runtime.services import Gateway
    from gateway.runtime.snapshot import Runtime

ROUTES = "The inventory routes"


def tenant_row(runtime: Runtime, tenant: Tenant) -> dict[str, Any]:
    policy = tenant.policy
    approvals = policy.approvals
    users = tenant.users
    return {
        "object": "toolgate.tenant",
        "id": tenant.id,
        "models": sorted(tenant.models),
        "tools": list(tenant.tools),
        "limits": tenant.limits.model_dump(mode="json"),
        "budget": tenant.budget.model_dump(mode="json") if tenant.budget is not None else None,
        "policy": {
            "input": policy.input,
            "after_untrusted": policy.after_untrusted,
            "approvals": {
                "operator": approvals.operator,
                "timeout_s": approvals.timeout_s,
                "webhook": approvals.webhook is not None,  # its URL may carry a password
                "approver_keys": len(approvals.admin_keys),
            },
        },
        "record": tenant.record,
        "tool_search": tenant.tool_search.mode,
        "users": None
        if users is None
        else "asserted"
        if isinstance(users, AssertedUsersConfig)
        else "verified",
        "keys": runtime.tenants.key_ids(tenant.id),
    }


async def tenant_rows(gateway: Gateway, tenants: Sequence[Tenant]) -> list[dict[str, Any]]:
    """Each tenant's row with what it has spent in today's and this month's windows,
    and what is left of its budget there (``spent``)."""
    runtime = gateway.runtime
    spent: dict[str, list[dict[str, Any]]] = {tenant.id: [] for tenant in tenants}
    for window in await usage_rows(gateway, list(tenants)):
        spent[window.pop("tenant")].append(window)
    return [tenant_row(runtime, tenant) | {"spent": spent[tenant.id]} for tenant in tenants]


def configuration_summary(runtime: Runtime) -> dict[str, Any]:
    """The configuration in force, as an operator reads it: its upstreams (name and
    host, never a path, key or header), models, tools by source, tenants, and what was
    left out or is suspect (the warnings of its last load, and what ``toolgate check``
    finds in it)."""
    config = runtime.config
    sources: dict[str, int] = {}
    for tool in runtime.registry:
        sources[tool.label] = sources.get(tool.label, 0) + 1
    return {
        "object": "toolgate.configuration",
        "upstreams": [
            {"name": u.name, "host": urlsplit(u.base_url).hostname or ""} for u in config.upstreams
        ],
        "models": [m.name for m in config.models],
        "tools": len(runtime.registry),
        "sources": dict(sorted(sources.items())),
        "tenants": len(runtime.tenants.all()),
        "console": config.console.enabled,
        "warnings": list(runtime.warnings),
        "findings": findings(config, runtime),
    }


def tool_row(tenant: Tenant, runtime: Runtime, name: str) -> dict[str, Any] | None:
    tool = runtime.registry.get(name)
    if tool is None:
        return None
    seen = tenant.policy.of(tool)
    return {
        "object": "toolgate.tool",
        "name": tool.name,
        "description": tool.description,
        "source": tool.label,
        "effects": seen.effects,
        "output": seen.output,
        "approval": seen.approval,
        "cost_usd": seen.cost_usd,
        "cache_ttl_s": tool.cache_ttl_s,
        "version": seen.version,
        "parameters": tool.definition.parameters,
    }


MAX_QUERY = 200  # characters of a find box's query read


def source_rows(gateway: Gateway, tenant: Tenant, admin: bool) -> list[dict[str, Any]]:
    """Where the tenant's tools come from: each source with how many of them it gives;
    one read at run time (an OpenAPI URL, an MCP server) with its state too, and, for
    the admin key only, what went wrong last (it may name the server) and the sources
    that give no tool now (down: no tenant's, or any tenant's)."""
    runtime = gateway.runtime
    allowed = frozenset(tenant.tools)
    sources = gateway.runtimes.sources
    remotes = sources.all() if sources is not None else []
    remote_names = {tool.name for remote in remotes for tool in remote.tools}
    counts: dict[str, int] = {}
    for name in tenant.tools:
        tool = runtime.registry.get(name)
        if tool is not None and name not in remote_names:
            counts[tool.label] = counts.get(tool.label, 0) + 1
    rows: list[dict[str, Any]] = [
        {"source": label, "tools": n, "state": "loaded", "last_error": None}
        for label, n in sorted(counts.items())
    ]
    for remote in remotes:
        given = sum(1 for tool in remote.tools if tool.name in allowed)
        if given or (admin and remote.state != "ready"):
            error = remote.last_error if admin else None
            rows.append(
                {"source": remote.label, "tools": given, "state": remote.state, "last_error": error}
            )
    return rows


async def find_tools(
    gateway: Gateway, runtime: Runtime, tenant: Tenant, query: str
) -> tuple[list[str], str]:
    """The tenant's tools that match ``query``'s words, best first, as tool search ranks
    them (BM25 over names, descriptions and parameters: ``ranked``); an empty query
    finds every tool (``all``). Where no tenant searches its tools the snapshot has no
    index: one is built for it, off the event loop, at the first query."""
    query = query[:MAX_QUERY].strip()
    if not query:
        return list(tenant.tools), "all"
    catalogs = runtime.catalogs
    if catalogs is None:
        known = gateway.find_index
        if known is not None and known[0] is runtime:
            catalogs = known[1]
        else:
            catalogs = await asyncio.to_thread(Catalogs.build, runtime.registry)
            gateway.find_index = (runtime, catalogs)
    allowed = frozenset(tenant.tools)
    # cut as every ranking is (FIT): a description stuffed with the catalog's words is filler
    return catalogs.index.search(query, len(allowed), allowed, FIT), "ranked"


class Inventory:
    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    async def tenants(self, request: Request, exchange: Exchange) -> Response:
        scope = await operator_admitted(self._gateway, request, ROUTES)
        rows = await tenant_rows(self._gateway, scope.tenants)
        return json_response({"object": "list", "data": rows})

    async def configuration(self, request: Request, exchange: Exchange) -> Response:
        """``GET /v1/toolgate/configuration``: the admin key's only (every tenant's)."""
        scope = await operator_admitted(self._gateway, request, ROUTES)
        runtime = self._gateway.runtime
        if not scope.admin:
            raise NotFound("The configuration is the admin key's to read.")
        return json_response(configuration_summary(runtime))

    async def tools(self, request: Request, exchange: Exchange) -> Response:
        scope = await operator_admitted(self._gateway, request, ROUTES)
        runtime = self._gateway.runtime  # the snapshot the scope was judged by, or newer
        asked = request.query_params.get("tenant")
        if asked is None:
            if len(scope.tenants) != 1:
                raise BadRequest("Name the tenant: ?tenant=ID.", param="tenant")
            tenant = scope.tenants[0]
        else:
            found = scope.tenant(asked)
            if found is None:  # another tenant's and an unknown one read the same
                raise NotFound(f"No tenant {asked[:64]!r} this key may see.")
            tenant = found
        query = request.query_params.get("q", "")
        names, how = await find_tools(self._gateway, runtime, tenant, query)
        rows = [row for name in names if (row := tool_row(tenant, runtime, name))]
        return json_response(
            {
                "object": "list",
                "tenant": tenant.id,
                "found": how,
                "data": rows,
                "sources": source_rows(self._gateway, tenant, scope.admin),
            }
        )
