"""The tool sources known only at run time: OpenAPI documents at URLs and MCP servers.

Each is a ``RemoteSource``: started in the background, waited for a little at start
and on reload, retried with backoff while it cannot be read, and reporting its tools
and state. ``RemoteSources`` holds the running ones. A reload is two-phase: ``plan``
starts what the new configuration adds (keeping what it keeps, connections
included), and the plan is then adopted (and what it dropped closed) or discarded
(what it started is closed), so a bad file changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from gateway.config import GatewayConfig
from tool_registry import (
    FIELDS,
    Backoff,
    GuardedTransport,
    McpServer,
    McpServerConfig,
    OpenApiSource,
    Tool,
    ToolConfigError,
    fetch_document,
    openapi_tools,
)

logger = logging.getLogger("gateway.sources")

_BACKOFF_CAP_S = 60.0


class RemoteSource(Protocol):
    @property
    def label(self) -> str: ...  # for operators: "openapi <url>", "mcp <name>"

    @property
    def state(self) -> str: ...  # connecting | ready | down

    @property
    def last_error(self) -> str | None: ...

    @property
    def tools(self) -> list[Tool]: ...

    async def start(self, wait_s: float | None = None) -> None: ...

    async def aclose(self) -> None: ...


class OpenApiUrl:
    """An OpenAPI document at a URL: fetched under the egress policy until it is read."""

    def __init__(
        self,
        source: OpenApiSource,
        transport: GuardedTransport,
        on_change: Callable[[], None],
        backoff_s: float = 1.0,
    ) -> None:
        self.source = source
        self.label = f"openapi {source.label}"
        self.state = "connecting"
        self.last_error: str | None = None
        self.tools: list[Tool] = []
        self.skipped: list[str] = []
        self._transport = transport
        self._on_change = on_change
        self._backoff_s = backoff_s
        self._tried = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self, wait_s: float | None = None) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=self.label)
        if wait_s:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await self._tried.wait()

    async def _run(self) -> None:
        backoff = Backoff(self._backoff_s, _BACKOFF_CAP_S)
        while True:
            try:
                document = await fetch_document(
                    self.source.spec, self._transport, timeout_s=self.source.timeout_s
                )
                # Reading hundreds of operations is CPU work: off the event loop.
                found = await asyncio.to_thread(
                    openapi_tools, document, self.source, self.source.label
                )
            except (ToolConfigError, ValueError, TypeError, RecursionError) as exc:
                # A hostile document is a failed source, retried, never a dead task.
                # A ToolConfigError's message begins with the URL the label names.
                self.state = "down"
                self.last_error = (
                    str(exc).removeprefix(f"{self.source.label}: ")
                    if isinstance(exc, ToolConfigError)
                    else f"the document cannot be read ({type(exc).__name__})"
                )
                logger.warning(
                    "%s: %s; trying again in %gs",
                    self.label,
                    self.last_error,
                    backoff.delay,
                    extra={FIELDS: {"source": self.label, "outcome": "down"}},
                )
                self._tried.set()
                await backoff.wait()
                continue
            self.tools, self.skipped = list(found.tools), found.skipped
            self.state, self.last_error = "ready", None
            self._tried.set()
            self._on_change()
            return

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class McpSource:
    """An MCP server as a ``RemoteSource``."""

    def __init__(self, server: McpServer) -> None:
        self.server = server
        self.label = f"mcp {server.name}"

    @property
    def state(self) -> str:
        return self.server.state

    @property
    def last_error(self) -> str | None:
        return self.server.last_error

    @property
    def tools(self) -> list[Tool]:
        return self.server.offered

    async def start(self, wait_s: float | None = None) -> None:
        await self.server.start(wait_s)

    async def aclose(self) -> None:
        await self.server.aclose()


def _key(source: OpenApiSource | McpServerConfig) -> str:
    return f"{type(source).__name__}:{source.model_dump_json()}"


@dataclass
class Plan:
    """The sources of one configuration: kept, started for it, and to be closed."""

    sources: dict[str, RemoteSource] = field(default_factory=dict)
    started: list[RemoteSource] = field(default_factory=list)
    dropped: list[RemoteSource] = field(default_factory=list)
    # Sources read again that failed, whose last good reading stays in use instead.
    kept_stale: list[str] = field(default_factory=list)
    # Sources read again whose reading (the fetch, then building hundreds of
    # operations) was not done when the plan stopped waiting: the last good reading
    # stays in use until it is, then the new one takes its place (by key).
    reading: dict[str, RemoteSource] = field(default_factory=dict)
    wait_s: float = 0.0

    def warnings(self) -> list[str]:
        """What an operator should hear about this plan's sources."""
        found = [f"{label}: cannot be read again; its last tools stay" for label in self.kept_stale]
        found += [
            f"{source.label}: still being read after {self.wait_s:g}s (its fetch and "
            "building its tools); its last tools stay until it is"
            for source in self.reading.values()
        ]
        found += [
            f"{s.label}: {s.state}"
            + (f" ({s.last_error})" if s.last_error else "")
            + "; retried in the background"
            for s in self.sources.values()
            if s.state != "ready"
        ]
        return found


class RemoteSources:
    def __init__(
        self,
        transport: GuardedTransport,
        on_change: Callable[[], None],
    ) -> None:
        self._transport = transport
        self._on_change = on_change
        self._sources: dict[str, RemoteSource] = {}
        self._reading: dict[str, RemoteSource] = {}  # an adopted plan's, still being read
        self._closing: set[asyncio.Task[None]] = set()

    def _changed(self, key: str, made: list[RemoteSource]) -> None:
        """A source's change matters once it is one of the running sources; one still
        being read that is now ready takes the place of the reading it replaces."""
        [source] = made
        if self._reading.get(key) is source and source.state == "ready":
            del self._reading[key]
            old = self._sources.get(key)
            self._sources[key] = source
            if old is not None and old is not source:
                closing = asyncio.get_running_loop().create_task(old.aclose())
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)
        if self._sources.get(key) is source:
            self._on_change()

    def _new(self, key: str, source: OpenApiSource | McpServerConfig) -> RemoteSource:
        made: list[RemoteSource] = []

        def changed() -> None:
            self._changed(key, made)

        new: RemoteSource
        if isinstance(source, McpServerConfig):
            new = McpSource(McpServer(source, self._transport.policy, changed))
        else:
            new = OpenApiUrl(source, self._transport, changed)
        made.append(new)
        return new

    async def plan(self, config: GatewayConfig, wait_s: float) -> Plan:
        """Start what ``config`` adds, keep what it keeps; wait up to ``wait_s`` for the
        new ones' first answer. An OpenAPI URL is fetched again on every plan."""
        plan = Plan(wait_s=wait_s)
        wanted: list[OpenApiSource | McpServerConfig] = [
            *(s for s in config.openapi if s.is_url),
            *config.mcp,
        ]
        previous: dict[str, RemoteSource] = {}
        for source in wanted:
            key = _key(source)
            kept = self._sources.get(key)
            if kept is not None and isinstance(source, McpServerConfig):
                plan.sources[key] = kept
                continue
            plan.sources[key] = new = self._new(key, source)
            plan.started.append(new)
            if kept is not None:
                previous[key] = kept
        await asyncio.gather(*(s.start(wait_s) for s in plan.started))
        for key, kept in previous.items():
            fresh = plan.sources[key]
            if fresh.state == "ready" or kept.state != "ready":
                continue
            # The last good reading stays in use: for good where the document cannot
            # be read again, until it is where its reading is not done yet.
            plan.sources[key] = kept
            if fresh.state == "connecting":
                plan.reading[key] = fresh
            else:
                plan.kept_stale.append(kept.label)
        in_use = {id(s) for s in (*plan.sources.values(), *plan.reading.values())}
        plan.dropped = [s for s in (*self._sources.values(), *plan.started) if id(s) not in in_use]
        return plan

    def adopt(self, plan: Plan) -> None:
        """Make ``plan``'s sources the running ones (then ``close_dropped``); those it
        is still reading take their places as each is ready."""
        readings, self._reading = self._reading, dict(plan.reading)
        self._sources = plan.sources
        for stale in readings.values():  # a reload before they were read: no longer wanted
            if all(stale is not s for s in (*plan.sources.values(), *plan.reading.values())):
                plan.dropped.append(stale)
        for key, source in plan.reading.items():
            if source.state == "ready":  # ready between the plan and now
                self._changed(key, [source])

    @staticmethod
    async def close_dropped(plan: Plan) -> None:
        await asyncio.gather(*(s.aclose() for s in plan.dropped))

    @staticmethod
    async def discard(plan: Plan) -> None:
        await asyncio.gather(*(s.aclose() for s in plan.started))

    def tools(self, plan: Plan | None = None) -> list[Tool]:
        sources = (plan.sources if plan is not None else self._sources).values()
        return [tool for source in sources for tool in source.tools]

    def all(self) -> list[RemoteSource]:
        return list(self._sources.values())

    async def aclose(self) -> None:
        sources, self._sources = list(self._sources.values()), {}
        reading, self._reading = list(self._reading.values()), {}
        await asyncio.gather(*(s.aclose() for s in (*sources, *reading)), *self._closing)
