"""The app factory: ``create_app(config)`` builds everything; nothing lives at import."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response

from tool_registry import EgressPolicy, ToolExecutor, ToolRegistry, create_tool_transport

from . import probe
from .config import GatewayConfig
from .config_loader import load_config
from .conversations import ConversationStore
from .errors import GatewayError, NotFound
from .gc_tuning import tune_gc
from .http import error_response, new_request_id
from .logs import configure_logging
from .mcp_endpoint import McpEndpoint
from .metrics import Metrics
from .models import ModelRouter
from .observe import Observer
from .rate_limit import RateLimiter
from .redaction import RedactionMiddleware, redactor_of
from .response_store import ResponseStore
from .result_cache import ResultCache
from .routes import build_routes
from .runtime import Runtime
from .runtimes import Runtimes, reload_on_sighup
from .store import Keys, open_store
from .tenants import TenantDirectory
from .tool_loop import ToolLoop
from .traces import TraceStore
from .turns import TurnStore
from .upstream import UpstreamClient, create_upstream_transport


class Gateway:
    """The services one app uses. Clients are opened and closed by the app's lifespan."""

    def __init__(
        self,
        config: GatewayConfig,
        *,
        config_path: str | Path | None = None,
        upstream_transport: httpx.AsyncBaseTransport | None = None,
        tool_transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.metrics = Metrics()
        # One for the process: a reload extends it (see ``Redactor``).
        self.redactor = redactor_of(config)
        self.runtimes = Runtimes(config, self.metrics, self.redactor, config_path)
        self.observer = Observer(self.metrics)
        self.egress = EgressPolicy(
            deny_private=config.egress.deny_private,
            allow_hosts=frozenset(h.lower() for h in config.egress.allow_hosts),
        )
        self._upstream_transport = upstream_transport
        self._tool_transport = tool_transport
        self._transports: list[httpx.AsyncBaseTransport] = []
        self.keys = Keys(config.store.prefix)

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
        self.tool_transport = tools
        self.upstream = UpstreamClient(upstream, metrics=metrics)
        self.executor = ToolExecutor(tools, self.egress, redactor=self.redactor)
        self.loop = ToolLoop(
            self.upstream,
            self.executor,
            keepalive_s=config.server.stream_keepalive_s,
            cache=self.cache,
            metrics=metrics,
        )
        await self.runtimes.start(tools, self.egress)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.runtimes.aclose()
        for transport in self._transports:
            await transport.aclose()
        await self.store.aclose()


def create_app(
    config: GatewayConfig,
    *,
    config_path: str | Path | None = None,
    announce: str | None = None,
    upstream_transport: httpx.AsyncBaseTransport | None = None,
    tool_transport: httpx.AsyncBaseTransport | None = None,
) -> Starlette:
    """Build the ASGI app. With ``config_path`` a reload (``SIGHUP``, ``POST
    /admin/reload``) reads that file again. With ``announce`` (the URL it listens on)
    it probes its upstreams and tools once started and says what answered. Transports
    may be given to run without a network (tests)."""
    gateway = Gateway(
        config,
        config_path=config_path,
        upstream_transport=upstream_transport,
        tool_transport=tool_transport,
    )

    mcp = McpEndpoint(gateway)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with gateway, mcp.running():
            with reload_on_sighup(gateway.runtimes):
                probing = (
                    asyncio.create_task(probe.announce(gateway, announce)) if announce else None
                )
                yield
                if probing is not None and not probing.done():
                    probing.cancel()

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
        routes=build_routes(gateway, mcp),
        lifespan=lifespan,
        exception_handlers={HTTPException: http_error},
        middleware=middleware,
    )
    app.state.gateway = gateway
    return app


def create_app_from_env() -> Starlette:
    """Factory for ``uvicorn --factory`` (several workers): config from ``TOOLGATE_CONFIG``,
    JSON log lines at ``TOOLGATE_LOG_LEVEL`` in each worker process."""
    path = os.environ.get("TOOLGATE_CONFIG", "config/gateway.yaml")
    config = load_config(path)
    app = create_app(config, config_path=path)
    app.state.gateway.runtimes.one_of_workers = True
    configure_logging(os.environ.get("TOOLGATE_LOG_LEVEL", "info"), app.state.gateway.redactor)
    tune_gc()
    return app
