"""The app factory: ``create_app(config)`` builds everything; nothing lives at import."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import get_args

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response

from tool_registry import EgressPolicy, ToolExecutor, ToolRegistry, create_tool_transport
from tool_registry.results import Outcome

from .caps import CapKind
from .config import GatewayConfig
from .config_loader import load_config
from .conversations import ConversationStore
from .errors import GatewayError, NotFound
from .gc_tuning import tune_gc
from .http import error_response, new_request_id
from .logs import configure_logging
from .metrics import Labels, Metrics
from .models import ModelRouter
from .observe import Observer
from .rate_limit import RateLimiter
from .redaction import RedactionMiddleware, redactor_of
from .response_store import ResponseStore
from .result_cache import ResultCache
from .routes import build_routes
from .runtime import Runtime
from .store import Keys, open_store
from .tenants import TenantDirectory
from .tool_loop import ToolLoop
from .tool_sources import static_tools
from .traces import TraceStore
from .turns import TurnStore
from .upstream import UpstreamClient, create_upstream_transport


class Gateway:
    """The services one app uses. Clients are opened and closed by the app's lifespan."""

    def __init__(
        self,
        config: GatewayConfig,
        *,
        upstream_transport: httpx.AsyncBaseTransport | None = None,
        tool_transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        static = static_tools(config)
        self.runtime = Runtime.build(config, static.tools, warnings=static.warnings)
        self.metrics = Metrics()
        self._prime(self.runtime)
        self.observer = Observer(self.metrics)
        self.egress = EgressPolicy(
            deny_private=config.egress.deny_private,
            allow_hosts=frozenset(h.lower() for h in config.egress.allow_hosts),
        )
        self._upstream_transport = upstream_transport
        self._tool_transport = tool_transport
        self._transports: list[httpx.AsyncBaseTransport] = []
        self.keys = Keys(config.store.prefix)
        # One for the process: a reload extends it (see ``Redactor``).
        self.redactor = redactor_of(config)

    # The current snapshot's parts. A request reads ``runtime`` once instead.

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

    def _prime(self, runtime: Runtime) -> None:
        tenants = runtime.tenants.all()
        self.metrics.prime(
            Labels(
                tenants={t.id: (sorted(t.models), list(t.tools)) for t in tenants},
                upstreams=[u.name for u in runtime.config.upstreams],
                tools=list(runtime.registry.names),
                outcomes=get_args(Outcome),
                cap_kinds=get_args(CapKind),
            )
        )

    async def __aenter__(self) -> Gateway:
        config, metrics = self.config, self.metrics
        self.store = open_store(
            config.store.url,
            config.store.timeout_s,
            on_error=metrics.store_errors.inc,
            memory_max_bytes=config.store.memory_max_mb * 1024 * 1024,
        )
        self.limiter = RateLimiter(self.store, self.keys, config.store.on_error, metrics)
        self.turns = TurnStore(self.store, self.keys, config.store.turn_ttl_s, metrics)
        self.cache = ResultCache(self.store, self.keys, metrics)
        self.responses = ResponseStore(self.store, self.keys, config.responses.ttl_s)
        self.conversations = ConversationStore(self.store, self.keys, config.responses.ttl_s)
        self.traces = (
            TraceStore(self.store, self.keys, config.traces.ttl_s, config.traces.result_chars)
            if config.traces.enabled
            else None
        )
        self.observer.traces = self.traces
        upstream = self._upstream_transport or create_upstream_transport()
        tools = self._tool_transport or create_tool_transport(self.egress)
        self._transports = [upstream, tools]
        self.upstream = UpstreamClient(upstream, metrics=metrics)
        self.executor = ToolExecutor(tools, self.egress, redactor=self.redactor)
        self.loop = ToolLoop(
            self.upstream,
            self.executor,
            keepalive_s=config.server.stream_keepalive_s,
            cache=self.cache,
            metrics=metrics,
        )
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for transport in self._transports:
            await transport.aclose()
        await self.store.aclose()


def create_app(
    config: GatewayConfig,
    *,
    upstream_transport: httpx.AsyncBaseTransport | None = None,
    tool_transport: httpx.AsyncBaseTransport | None = None,
) -> Starlette:
    """Build the ASGI app. Transports may be given to run without a network (tests)."""
    gateway = Gateway(config, upstream_transport=upstream_transport, tool_transport=tool_transport)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with gateway:
            yield

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        error: GatewayError
        if exc.status_code == 404:
            error = NotFound(f"Unknown route {request.method} {request.url.path}.")
        else:
            error = GatewayError(
                f"{request.method} is not supported on {request.url.path}.",
                status=exc.status_code,
                error_type="invalid_request_error",
            )
        return error_response(error, new_request_id())

    middleware = [Middleware(RedactionMiddleware, redactor=gateway.redactor)]
    app = Starlette(
        routes=build_routes(gateway),
        lifespan=lifespan,
        exception_handlers={HTTPException: http_error},
        middleware=middleware,
    )
    app.state.gateway = gateway
    return app


def create_app_from_env() -> Starlette:
    """Factory for ``uvicorn --factory`` (several workers): config from ``TOOLGATE_CONFIG``,
    JSON log lines at ``TOOLGATE_LOG_LEVEL`` in each worker process."""
    config = load_config(os.environ.get("TOOLGATE_CONFIG", "config/gateway.yaml"))
    configure_logging(os.environ.get("TOOLGATE_LOG_LEVEL", "info"), redactor_of(config))
    app = create_app(config)
    tune_gc()
    return app
