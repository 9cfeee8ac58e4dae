"""The services one app uses (``Gateway``): the runtime snapshots, the store and what
lives in it, the upstream and tool clients, the loop. Built by ``create_app``, opened and
closed by its lifespan, and handed to the surfaces."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import httpx

from gateway.config import ApprovalsConfig, GatewayConfig
from gateway.engine.loop import ToolLoop
from gateway.ops.afterwards import Afterwards
from gateway.ops.metrics import Metrics
from gateway.ops.redaction import redactor_of
from gateway.ops.telemetry import otel_settings
from gateway.ops.webhook import Webhooks
from gateway.policy.approval_desk import ApprovalDesk, Notify
from gateway.policy.budgets import Budgets
from gateway.policy.guardrails import Guard
from gateway.policy.identity import owner_digest
from gateway.policy.large_bodies import LargeBodies
from gateway.policy.limits import Narrowing
from gateway.policy.meanings import Meanings
from gateway.policy.models import ModelRouter
from gateway.policy.point import PolicyPoint
from gateway.policy.rate_limit import RateLimiter
from gateway.policy.tenants import Tenant, TenantDirectory
from gateway.policy.tool_search import Catalogs
from gateway.runtime.credentials import UserCredentials
from gateway.runtime.discovery import Discovery
from gateway.runtime.oauth import OAuthClient
from gateway.runtime.providers import Providers
from gateway.runtime.runtimes import Runtimes
from gateway.runtime.snapshot import Runtime
from gateway.runtime.user_keys import UserKeys
from gateway.store import Keys, open_store
from gateway.store.activity import Activity, ActivityStore
from gateway.store.approval_records import ApprovalRecord, ApprovalStore, Approver
from gateway.store.audit import AuditLog
from gateway.store.budget_counters import BudgetStore
from gateway.store.consent import TICKET_TTL_S, Consents
from gateway.store.conversations import ConversationStore
from gateway.store.grants import GrantStore, Sealer
from gateway.store.kept_writes import KeptWrites
from gateway.store.registrations import Registrations
from gateway.store.responses import ResponseStore
from gateway.store.result_cache import ResultCache
from gateway.store.runs import RunLog
from gateway.store.traces import TraceStore
from gateway.store.turns import TurnStore
from gateway.store.vectors import VectorStore
from gateway.upstream.servers import ModelServers
from gateway.upstream.wire import Wire, upstream_wire
from tool_registry import ToolExecutor, ToolRegistry, create_tool_transport

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

    from gateway.ops.export import Telemetry


class Gateway:
    """The services one app uses. Clients are opened and closed by the app's lifespan."""

    def __init__(
        self,
        config: GatewayConfig,
        *,
        config_path: str | Path | None = None,
        upstream_transport: httpx.AsyncBaseTransport | None = None,
        tool_transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.time,
        environ: Mapping[str, str] = os.environ,
        span_exporter: SpanExporter | None = None,
    ) -> None:
        self.metrics = Metrics()
        self.clock = clock  # wall time, for budget windows (tests move it)
        # One for the process: a reload extends it (see ``Redactor``).
        self.redactor = redactor_of(config)
        self.runtimes = Runtimes(config, self.metrics, self.redactor, config_path)
        self.egress = config.egress.policy()
        self._upstream_transport = upstream_transport
        self._tool_transport = tool_transport
        self._closing: list[Wire | httpx.AsyncBaseTransport] = []
        self.keys = Keys(config.store.prefix)
        self.large_bodies = LargeBodies(self.metrics)  # of this process, across reloads
        # Read now: a bad OTEL_* variable or a missing gRPC extra stops the start.
        self.otel = otel_settings(config.otel, environ)
        self._span_exporter = span_exporter
        self.telemetry: Telemetry | None = None

    @property
    def runtime(self) -> Runtime:
        """The current snapshot: a request reads it once and uses it to its end."""
        return self.runtimes.current

    # The current snapshot's parts, for what is not a request (start-up, the CLI).

    @property
    def config(self) -> GatewayConfig:
        return self.runtime.config

    @property
    def registry(self) -> ToolRegistry:
        return self.runtime.registry

    @property
    def tenants(self) -> TenantDirectory:
        return self.runtime.tenants

    @property
    def models(self) -> ModelRouter:
        return self.runtime.models

    async def __aenter__(self) -> Gateway:
        config, metrics = self.config, self.metrics
        self.store = open_store(
            config.store.url,
            config.store.timeout_s,
            on_error=metrics.store_errors.inc,
            memory_max_bytes=config.store.memory_max_mb * 1024 * 1024,
            keep_retry_s=config.store.keep_retry_s,
        )
        await self.store.connect()
        # A request's trace, recording and runs row: kept after its answer is sent.
        self.afterwards = Afterwards()
        self.afterwards.start()
        settled = self.afterwards.settled
        self.limiter = RateLimiter(self.store, self.keys, config.store.on_error, metrics)
        self.turns = TurnStore(self.store, self.keys, config.store.turn_ttl_s, metrics)
        self.cache = ResultCache(self.store, self.keys, metrics)
        self.responses = ResponseStore(self.store, self.keys, config.responses.ttl_s)
        self.conversations = ConversationStore(self.store, self.keys, config.responses.ttl_s)
        self.approvals = ApprovalStore(self.store, self.keys)
        self.audit = AuditLog(self.store, self.keys)
        self.runs = RunLog(self.store, self.keys, lambda: self.runtime.config.console, settled)
        self.activity = ActivityStore(self.store, self.keys, Activity(self.clock))
        self.kept_writes = KeptWrites(self.store, self.keys)
        # Users' tokens for their connections, sealed (docs/design.md §18), where configured.
        self.grants = (
            GrantStore(self.store, self.keys, config.grants) if config.grants is not None else None
        )
        self.consents = Consents(  # connections being made
            self.store,
            self.keys,
            config.grants.link_ttl_s if config.grants is not None else TICKET_TTL_S,
        )
        self.budgets = Budgets(
            BudgetStore(self.store, self.keys, self.clock), config.store.on_error, metrics
        )
        self.traces = (
            TraceStore(
                self.store, self.keys, config.traces.ttl_s, config.traces.result_chars, settled
            )
            if config.traces.enabled
            else None
        )
        # The operator's model servers: one aiohttp session (or a test's transport).
        upstream = upstream_wire(self._upstream_transport)
        # The one way out for tools, webhooks, documents and replay (a test's transport
        # goes under the same guard).
        tools = create_tool_transport(self.egress, inner=self._tool_transport)
        self._closing = [upstream, tools]
        self.upstream_wire = upstream
        self.tool_transport = tools
        self.webhooks = Webhooks(tools)
        # The model port; the credentials a dialect signs with join the secrets redacted.
        self.model_servers = ModelServers(upstream, metrics=metrics, secrets=self.redactor.extend)
        # Tool search's vectors, from the operator's embeddings model where configured:
        # each snapshot's catalog is embedded in the background once it is current.
        # The guardrails' judges (docs/guardrails.md): the model port, the one way out.
        # The console's find box: tool search's index of a snapshot that has none (its
        # tenants search nothing), built off the loop at its first query.
        self.find_index: tuple[Runtime, Catalogs] | None = None
        self.guard = Guard(
            metrics,
            models=self.model_servers,
            routes=lambda name: self.runtime.models.route(name),
            transport=tools,
            clock=self.clock,
        )
        self.meanings = Meanings(
            self.model_servers.exchange, VectorStore(self.store, self.keys), metrics
        )
        self.runtimes.swapped = self._embed_catalog
        self._embed_catalog(self.runtime)
        self.executor = ToolExecutor(tools, redactor=self.redactor)
        # Providers' metadata and keys, fetched through the guard (users' and connections').
        discovery = Discovery(tools)
        self.users = UserKeys(discovery)  # end users' identity providers' keys
        self.oauth = OAuthClient(tools, discovery)  # connections' token endpoints, guarded
        registrations = (
            Registrations(self.store, self.keys, Sealer.of(config.grants))
            if config.grants is not None
            else None
        )
        # Where each connection's endpoints are, and who the gateway is there.
        self.providers = Providers(tools, discovery, registrations)
        self.loop = ToolLoop(
            self.executor,
            keepalive_s=config.server.stream_keepalive_s,
            cache=self.cache,
            metrics=metrics,
        )
        if self.otel is not None:
            from gateway.ops.export import Telemetry  # the SDK: imported only when tracing

            self.telemetry = Telemetry(self.otel, metrics, self.redactor, self._span_exporter)
        await self.runtimes.start(tools)
        return self

    def console_on(self) -> bool:
        """Whether the configuration in force has the console on."""
        return self.runtime.config.console.enabled

    def request_policy(
        self,
        runtime: Runtime,
        tenant: Tenant,
        narrowing: Narrowing,
        client_tools: frozenset[str],
        identity: str,
        client_approves: bool,
        searched: bool = False,
        request_id: str = "",
    ) -> tuple[PolicyPoint, tuple[str, ...]]:
        """The one factory of a request's policy, for every surface and ``/mcp``: the
        tenant's allowlist, caps and rules narrowed by the request (and the server
        tools its own tools shadow), with who approves its held calls — the client if
        it can (``client_approves``), else an operator if the tenant has one, else
        no one (they are refused). ``searched``: the request's tools may be searched
        (a model request's, where the tenant's settings say so; never ``/mcp``'s)."""
        desk = None
        if tenant.tools:  # nothing is held without tools
            approvals = tenant.policy.approvals
            approver: Approver | None = (
                "client" if client_approves else "operator" if approvals.operator else None
            )
            desk = ApprovalDesk(
                store=self.approvals,
                tenant=tenant.id,
                owner=owner_digest(identity),
                config=approvals,
                approver=approver,
                notify=self.approval_notice(approvals),
                request_id=request_id,
            )
        return PolicyPoint.of_request(
            tenant.tools,
            tenant.limits,
            narrowing,
            client_tools,
            runtime.registry,
            rules=tenant.policy,
            desk=desk,
            tenant=tenant.id,
            metrics=self.metrics,
            search=(catalogs, tenant.tool_search)
            if searched and (catalogs := runtime.catalogs) is not None
            else None,
            members=tenant.members,
            guard=self.guard,
        )

    def credentials(
        self, runtime: Runtime, tenant: str, user: str | None, user_token: str | None
    ) -> UserCredentials | None:
        """A request's user's tokens, where tools may call as the user (docs/design.md §18):
        for every surface and ``/mcp``."""
        config = runtime.config
        public = config.server.public_url
        if not config.connections or self.grants is None or public is None:
            return None
        return UserCredentials(
            connections=config.connections,
            grants=self.grants,
            consents=self.consents,
            oauth=self.oauth,
            providers=self.providers,
            public_url=public,
            tenant=tenant,
            user=user,
            subject_token=user_token,
        )

    def approval_notice(self, config: ApprovalsConfig) -> Notify | None:
        """How a tenant's operator hears of a pending approval: its webhook, if any."""
        url = config.webhook
        if url is None:
            return None

        secret = config.webhook_secret.get_secret_value() if config.webhook_secret else None

        async def notify(record: ApprovalRecord) -> None:
            event = {"type": "approval.pending", "approval": record.public()}
            self.webhooks.post(url, event, secret)

        return notify

    def _embed_catalog(self, runtime: Runtime) -> None:
        if runtime.catalogs is not None:
            self.meanings.warm(runtime.config, runtime.catalogs.index)

    async def __aexit__(self, *exc_info: object) -> None:
        await self.afterwards.aclose()  # every answered request's writes, kept first
        self.runtimes.swapped = None
        await self.meanings.aclose()
        await self.webhooks.aclose()
        await self.runtimes.aclose()
        for transport in self._closing:
            await transport.aclose()
        await self.store.aclose()
        if self.telemetry is not None:
            await anyio.to_thread.run_sync(self.telemetry.close)
