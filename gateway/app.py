"""The app factory: ``create_app(config)`` builds everything; nothing lives at import."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.config import GatewayConfig
from gateway.errors import GatewayError, NotFound
from gateway.ops.gc_tuning import tune_gc
from gateway.ops.logs import configure_logging
from gateway.ops.redaction import RedactionMiddleware
from gateway.runtime import probe
from gateway.runtime.loader import load_config
from gateway.runtime.runtimes import reload_on_sighup
from gateway.runtime.services import Gateway
from gateway.runtime.watch import watching
from gateway.store.activity import flushing
from gateway.surfaces.head import Admission
from gateway.surfaces.hot_routes import HotRoutes, hot_endpoints
from gateway.surfaces.http import error_response, new_request_id
from gateway.surfaces.mcp_server import McpEndpoint
from gateway.surfaces.observe import Observer
from gateway.surfaces.routes import build_routes
from tool_registry import Redactor

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter


def create_app(
    config: GatewayConfig,
    *,
    config_path: str | Path | None = None,
    announce: str | None = None,
    upstream_transport: httpx.AsyncBaseTransport | None = None,
    tool_transport: httpx.AsyncBaseTransport | None = None,
    clock: Callable[[], float] = time.time,
    environ: Mapping[str, str] = os.environ,
    span_exporter: SpanExporter | None = None,
) -> GatewayApp:
    """Build the ASGI app. With ``config_path`` a reload (``SIGHUP``, ``POST
    /admin/reload``) reads that file again. With ``announce`` (the URL it listens on)
    it probes its upstreams and tools once started and says what answered. Transports
    may be given to run without a network (tests), and a wall ``clock`` to move budget
    windows across their boundaries. Tracing reads ``OTEL_*`` from ``environ``; a
    ``span_exporter`` takes the spans in place of OTLP (tests)."""
    gateway = Gateway(
        config,
        config_path=config_path,
        upstream_transport=upstream_transport,
        tool_transport=tool_transport,
        clock=clock,
        environ=environ,
        span_exporter=span_exporter,
    )

    observer = Observer(gateway.metrics, redactor=gateway.redactor, recordings=config.recordings)
    admit = Admission(gateway)
    mcp = McpEndpoint(gateway, admit, observer)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with gateway, mcp.running(), contextlib.AsyncExitStack() as stack:
            observer.traces = gateway.traces
            observer.afterwards = gateway.afterwards
            observer.runs = gateway.runs
            observer.activity = gateway.activity.activity
            observer.console_on = gateway.console_on
            await stack.enter_async_context(flushing(gateway.activity, gateway.console_on))
            if gateway.telemetry is not None:
                observer.spans = gateway.telemetry.spans
            stack.enter_context(reload_on_sighup(gateway.runtimes))
            server = gateway.config.server
            if server.watch_config:
                await stack.enter_async_context(watching(gateway.runtimes, server.watch_interval_s))
            probing = asyncio.create_task(probe.announce(gateway, announce)) if announce else None
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

    async def crashed(request: Request, exc: Exception) -> Response:
        """Past every route's boundary (a middleware's failure, say): still the
        envelope, never starlette's plain text."""
        request_id = new_request_id()
        return error_response(GatewayError(f"The gateway failed ({request_id})."), request_id)

    routes = build_routes(gateway, admit, mcp, observer)
    inner = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: http_error, Exception: crashed},
    )
    app = GatewayApp(inner, gateway.redactor)
    app.state.gateway = gateway
    return app


class GatewayApp:
    """The gateway's ASGI app: a plain ASGI front on a starlette app, composed through
    what each documents. In front: the redaction of every answer (docs/design.md §7),
    then the model surfaces' hot routes (issue 38), which go straight to their
    endpoints, past starlette's error middleware, router and request-response wrappers
    (their endpoints answer every error themselves, ``http.endpoint``); everything else,
    the lifespan included, is starlette's. ``state`` and ``router`` are the starlette
    app's."""

    def __init__(self, inner: Starlette, redactor: Redactor) -> None:
        self.inner = inner
        self.state = inner.state
        self.router = inner.router
        hot = HotRoutes(inner, hot_endpoints(inner.routes))
        self._front = RedactionMiddleware(hot, redactor)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["app"] = self.inner  # as starlette sets it, for the hot routes too
        await self._front(scope, receive, send)


def create_app_from_env() -> GatewayApp:
    """Factory for ``uvicorn --factory`` (several workers): config from ``TOOLGATE_CONFIG``,
    JSON log lines at ``TOOLGATE_LOG_LEVEL`` in each worker process."""
    path = os.environ.get("TOOLGATE_CONFIG", "config/gateway.yaml")
    config = load_config(path)
    app = create_app(config, config_path=path)
    app.state.gateway.runtimes.one_of_workers = True
    configure_logging(os.environ.get("TOOLGATE_LOG_LEVEL", "info"), app.state.gateway.redactor)
    tune_gc()
    return app
