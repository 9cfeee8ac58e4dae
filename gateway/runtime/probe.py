"""What the gateway will use, and whether each answered (docs/design.md §9; issue 13).

At start (``toolgate serve``) and on demand (``toolgate check --probe``) the gateway
asks each upstream for ``GET /models``, each identity provider of tenants' users for
its signing keys (as a request would fetch them), each connection's provider for its
metadata (or its token endpoint for an answer) and each tool origin for ``GET /`` — any HTTP
answer counts as answering, but a model server's 503 that says it is loading (as
llama.cpp's does) is reported as loading — and reads the state of its remote sources. The result
is one block a person can read: a warning when something does not answer, never a
refusal to start (a model server may come up after the gateway).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx

from gateway.config import JwtUsersConfig, McpConnection, OAuth2Connection, UpstreamConfig
from gateway.config.users import Connection
from gateway.errors import UserKeysUnavailable
from gateway.runtime.providers import ProviderRefused
from gateway.runtime.user_keys import slash_hint
from tool_registry import FIELDS, EgressDenied, HttpTool, egress_denial, origin, send

if TYPE_CHECKING:
    from gateway.runtime.services import Gateway

logger = logging.getLogger("gateway.startup")

PROBE_TIMEOUT_S = 3.0
LOADING_HINT = "it is still loading its model; its requests get 502 until it has"
NO_MODEL_SERVER_HINT = (
    "start one (`ollama serve`, then `ollama pull qwen2.5:7b`), or point UPSTREAM_BASE_URL "
    "at any OpenAI-compatible server, or set OPENAI_API_KEY to use OpenAI"
)


@dataclass(frozen=True)
class Probe:
    kind: str  # "model server", "tools", "tool source", "identity provider", "connection",
    # "embeddings"
    name: str
    target: str
    ok: bool
    detail: str
    hint: str = ""
    loading: bool = False  # a model server that answers, still loading its model


async def probe_all(gateway: Gateway) -> list[Probe]:
    """Every upstream, every tool origin and every remote source, concurrently."""
    upstreams, tools, users, connections, meaning = await asyncio.gather(
        probe_upstreams(gateway),
        probe_tools(gateway),
        probe_users(gateway),
        probe_connections(gateway),
        probe_embeddings(gateway),
    )
    return [*upstreams, *tools, *users, *connections, *meaning]


async def probe_embeddings(gateway: Gateway) -> list[Probe]:
    """Tool search's embeddings model, timed on one request's text: a model slower than
    a request waits (``timeout_ms``) fails the probe, as every request would then be
    searched by words alone."""
    config = gateway.runtime.config
    settings, upstream = config.tool_search.embeddings, config.embedding_upstream
    timed = await gateway.meanings.timed(config)
    if timed is None or settings is None or upstream is None:
        return []
    took, failed = timed
    name, target = settings.model, upstream.base_url
    if failed is not None:
        hint = "tool search ranks by words alone until it answers"
        return [Probe("embeddings", name, target, False, failed, hint)]
    said = f"answered in {took * 1000:.0f} ms"
    if took * 1000 > settings.timeout_ms:
        hint = (
            f"a request waits {settings.timeout_ms} ms for it (tool_search.embeddings."
            "timeout_ms): most would be searched by words alone; raise it, or use a faster model"
        )
        return [Probe("embeddings", name, target, False, said, hint)]
    return [Probe("embeddings", name, target, True, said)]


async def probe_connections(gateway: Gateway) -> list[Probe]:
    """Each connection's provider (docs/connections.md): its metadata read, or its
    token endpoint reached, as a user's first connection would; nothing is asked of it."""

    async def one(connection: Connection) -> Probe:
        where = _provider_of(connection)
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S * 2):
                said = await gateway.providers.probe(connection)
        except (ProviderRefused, TimeoutError) as exc:
            detail = str(exc) or f"no answer within {PROBE_TIMEOUT_S * 2:g}s"
            hint = _connection_hint(connection, detail)
            return Probe("connection", connection.name, where, False, detail, hint)
        return Probe("connection", connection.name, where, True, said)

    return list(await asyncio.gather(*(one(c) for c in gateway.runtime.config.connections)))


def _provider_of(connection: Connection) -> str:
    if isinstance(connection, McpConnection):
        return connection.url
    if isinstance(connection, OAuth2Connection) and connection.issuer is not None:
        return connection.issuer
    return connection.token_url or ""


def _connection_hint(connection: Connection, detail: str) -> str:
    """What an operator can do about a provider the probe could not use."""
    issuer = getattr(connection, "issuer", None)
    if isinstance(issuer, str) and issuer.endswith("/") and "issuer" in detail:
        return (
            f"connections[{connection.name}].issuer ends with '/': an issuer is matched "
            "exactly, so try it without the slash (as the provider's metadata names it)"
        )
    return (
        f"users cannot connect {connection.name} until it can be used: check its "
        "address, and that the gateway may reach it (egress)"
    )


async def probe_users(gateway: Gateway) -> list[Probe]:
    """Each identity provider whose tokens name tenants' users (``users.jwt``): whether
    its signing keys can be had now, as a request would fetch them."""
    by_issuer: dict[tuple[str, str | None], tuple[JwtUsersConfig, list[str]]] = {}
    for tenant in gateway.runtime.tenants.all():
        if isinstance(tenant.users, JwtUsersConfig):
            key = (tenant.users.issuer, tenant.users.jwks_url)
            by_issuer.setdefault(key, (tenant.users, []))[1].append(tenant.id)

    async def one(settings: JwtUsersConfig, tenants: list[str]) -> Probe:
        where = settings.jwks_url or settings.issuer
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                count = await gateway.users.probe(settings)
        except (UserKeysUnavailable, ValueError, TimeoutError) as exc:
            said = str(exc) or f"no answer within {PROBE_TIMEOUT_S:g}s"
            hint = slash_hint(settings) or "no user token of these tenants can be verified"
            return Probe("identity provider", named(tenants), where, False, said, hint)
        return Probe("identity provider", named(tenants), where, True, f"{count} signing key(s)")

    return list(await asyncio.gather(*(one(s, t) for s, t in by_issuer.values())))


async def probe_upstreams(gateway: Gateway) -> list[Probe]:
    async def one(upstream: UpstreamConfig) -> Probe:
        try:
            status, message = await gateway.model_servers.probe(upstream, PROBE_TIMEOUT_S)
        except TimeoutError:
            return Probe(
                "model server",
                upstream.name,
                upstream.base_url,
                False,
                f"no answer within {PROBE_TIMEOUT_S:g}s",
                NO_MODEL_SERVER_HINT,
            )
        except httpx.TransportError as exc:
            return Probe(
                "model server",
                upstream.name,
                upstream.base_url,
                False,
                f"not reachable ({type(exc).__name__})",
                NO_MODEL_SERVER_HINT,
            )
        said = f"answered HTTP {status}" + (f" ({message[:80]})" if message else "")
        if gateway.model_servers.trouble.get(upstream.name) == "loading":
            return Probe(
                "model server",
                upstream.name,
                upstream.base_url,
                False,
                f"loading: {said}",
                LOADING_HINT,
                loading=True,
            )
        if status in (401, 403):
            return Probe(
                "model server",
                upstream.name,
                upstream.base_url,
                False,
                said,
                "check its api_key (UPSTREAM_API_KEY)",
            )
        return Probe("model server", upstream.name, upstream.base_url, True, said)

    return list(await asyncio.gather(*(one(u) for u in gateway.runtime.config.upstreams)))


NAMED = 5  # tools named in a probe's line; the rest are counted


def named(names: list[str]) -> str:
    """Tools as a probe's line names them: a few, and how many more (a catalog of
    thousands behind one origin made a start-up line of 62 KB)."""
    shown = ", ".join(names[:NAMED])
    return shown if len(names) <= NAMED else f"{shown} and {len(names) - NAMED:,} more"


async def probe_tools(gateway: Gateway) -> list[Probe]:
    """Each origin the HTTP tools call, once; the remote sources' states."""
    by_origin: dict[str, list[str]] = defaultdict(list)
    for tool in gateway.runtime.registry:
        if isinstance(tool, HttpTool):
            by_origin[origin(httpx.URL(tool.spec.http.url))].append(tool.name)

    async def one(where: str, names: list[str]) -> Probe:
        listed = named(names)
        try:
            request = httpx.Request("GET", where + "/", headers={"user-agent": "toolgate probe"})
            request.extensions["timeout"] = httpx.Timeout(PROBE_TIMEOUT_S).as_dict()
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                response = await send(gateway.tool_transport, request)
                await response.aclose()
        except (httpx.HTTPError, httpx.InvalidURL, OSError, TimeoutError, EgressDenied) as exc:
            denial = egress_denial(exc)
            detail = (
                "refused by the egress policy"
                if denial is not None
                else f"not reachable ({type(exc).__name__})"
            )
            return Probe(
                "tools",
                listed,
                where,
                False,
                detail,
                "calls to these tools will come back to the model as errors",
            )
        # Its root, not a tool: any answer says it is up (a 404 there is common).
        said = f"reachable (its root answered HTTP {response.status_code}; no tool was called)"
        return Probe("tools", listed, where, True, said)

    probes = list(await asyncio.gather(*(one(w, n) for w, n in by_origin.items())))
    sources = gateway.runtimes.sources
    for source in sources.all() if sources is not None else []:
        probes.append(
            Probe(
                "tool source",
                source.label,
                f"{len(source.tools)} tools",
                source.state == "ready",
                source.state + (f" ({source.last_error})" if source.last_error else ""),
                "" if source.state == "ready" else "retried in the background",
            )
        )
    return probes


def render(probes: list[Probe], listening: str | None = None) -> str:
    """The block: what the gateway uses and how each answered."""
    lines = []
    if listening is not None:
        lines.append(f"Toolgate is listening on {listening}")
    width = max((len(p.kind) for p in probes), default=0)
    for probe in probes:
        mark = "ok  " if probe.ok else "LOAD" if probe.loading else "FAIL"
        lines.append(
            f"  {mark} {probe.kind:<{width}}  {probe.name}  {probe.target}  {probe.detail}"
        )
        if probe.hint:
            lines.append(f"       {'':<{width}}  -> {probe.hint}")
    if not any(p.kind == "tools" or p.kind == "tool source" for p in probes):
        lines.append("  (no tools configured)")
    return "\n".join(lines)


async def announce(gateway: Gateway, listening: str) -> None:
    """The start-up block: on a terminal as text; in the log as one line per probe (a
    warning for each that did not answer, with what to do)."""
    probes = await probe_all(gateway)
    if sys.stderr.isatty():
        print(render(probes, listening), file=sys.stderr, flush=True)
    for probe in probes:
        fields = {"probe": probe.kind, "name": probe.name, "target": probe.target, "ok": probe.ok}
        text = f"{probe.kind} {probe.name} at {probe.target}: {probe.detail}"
        if probe.ok:
            logger.info(text, extra={FIELDS: fields})
        else:
            logger.warning(f"{text}; {probe.hint}", extra={FIELDS: fields})
