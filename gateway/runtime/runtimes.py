"""The current runtime snapshot and how it changes (docs/design.md §12).

A snapshot is replaced, never edited: when a running source's tools change (an MCP
server's list, an OpenAPI URL read at last) and on a reload (``SIGHUP``, ``POST
/admin/reload``). Requests in flight keep the snapshot they read. A reload that
fails — an invalid file, a tool that clashes — keeps the old snapshot and says why:
a log line, ``toolgate_config_reloads_total{result="error"}`` and the admin answer.

What a reload applies: upstreams (rotated keys included), models, tools of every
source, tenants and their limits. What it does not: ``server``, ``store``, ``egress``,
``traces``, ``otel`` and ``responses``, which the process set up at start (a reload that
changes them says so and applies the rest).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import get_args

from gateway.config import GatewayConfig
from gateway.errors import ConfigError
from gateway.ops.metrics import Labels, Metrics
from gateway.ops.redaction import secrets_of
from gateway.policy.rules import guarding_of
from gateway.runtime.loader import load_config
from gateway.runtime.remote_sources import RemoteSources
from gateway.runtime.snapshot import Runtime
from gateway.runtime.tool_sources import SourcedTools, static_tools
from gateway.values import CapKind
from tool_registry import GuardedTransport, Outcome, Redactor, ToolConfigError

logger = logging.getLogger("gateway.runtime")

START_WAIT_S = 10.0  # how long start-up and a reload wait for remote sources
REBUILD_DEBOUNCE_S = 0.05  # source changes this close together are one rebuild
# A reload that has not read its files by then fails (the thread is left to finish):
# a file that hangs a reader (a stalled network mount) never holds the next reload.
READ_TIMEOUT_S = 30.0
_RESTART_SECTIONS = ("server", "store", "egress", "traces", "otel", "responses")


@dataclass(frozen=True)
class Reloaded:
    """How a reload went, for the admin answer and the log."""

    ok: bool
    message: str
    tools: int = 0
    warnings: list[str] = field(default_factory=list)


class Runtimes:
    def __init__(
        self,
        config: GatewayConfig,
        metrics: Metrics,
        redactor: Redactor,
        config_path: str | Path | None = None,
    ) -> None:
        self._static: SourcedTools = static_tools(config)
        self._metrics = metrics
        self._redactor = redactor
        self.config_path = config_path
        # One of several worker processes (``--workers N``): a reload here would change
        # this worker only, so only ``SIGHUP`` to the supervisor reloads.
        self.one_of_workers = False
        self._sources: RemoteSources | None = None
        self._reloading = asyncio.Lock()
        self._dirty = False  # a source's tools changed since the last build
        self._rebuilding: asyncio.Task[None] | None = None
        # Told of each new current snapshot (the gateway embeds its catalog).
        self.swapped: Callable[[Runtime], None] | None = None
        self._swap(Runtime.build(config, self._static.tools, warnings=self._static.warnings))

    def _swap(self, runtime: Runtime) -> None:
        self.current = runtime
        if self.swapped is not None:
            self.swapped(runtime)
        self._metrics.prime(
            Labels(
                tenants={t.id: (sorted(t.models), list(t.tools)) for t in runtime.tenants.all()},
                upstreams=[u.name for u in runtime.config.upstreams],
                tools={tool.name: tool.source for tool in runtime.registry},
                outcomes=get_args(Outcome),
                cap_kinds=get_args(CapKind),
                guardrails=guardrail_labels(runtime.config),
            )
        )

    @property
    def sources(self) -> RemoteSources | None:
        return self._sources

    async def start(
        self,
        transport: GuardedTransport,
        wait_s: float = START_WAIT_S,
    ) -> None:
        """Start the remote sources, wait a little for them, and build with their tools."""
        self._sources = sources = RemoteSources(transport, self._changed)
        config = self.current.config
        plan = await sources.plan(config, wait_s)
        sources.adopt(plan)
        self._swap(await asyncio.to_thread(self._build, config, self._static))
        for source in sources.all():
            logger.info(
                "tool source %s: %s, %d tools%s",
                source.label,
                source.state,
                len(source.tools),
                f" ({source.last_error})" if source.last_error else "",
            )
        for warning in self.current.warnings:
            logger.warning("tools: %s", warning)

    def _build(self, config: GatewayConfig, static: SourcedTools) -> Runtime:
        discovered = self._sources.tools() if self._sources is not None else []
        return Runtime.build(config, static.tools, discovered, static.warnings)

    def _changed(self) -> None:
        """A running source's tools changed: a new snapshot with the same configuration,
        built soon. Changes that come together are one build, and the build runs in a
        worker thread: a server that changes its list all the time stalls nothing."""
        self._dirty = True
        if self._rebuilding is None or self._rebuilding.done():
            self._rebuilding = asyncio.get_running_loop().create_task(self._rebuild())

    async def _rebuild(self) -> None:
        while self._dirty:
            await asyncio.sleep(REBUILD_DEBOUNCE_S)
            self._dirty = False
            async with self._reloading:
                try:
                    runtime = await asyncio.to_thread(
                        self._build, self.current.config, self._static
                    )
                except ConfigError as exc:  # a source's new tools clash with the config
                    logger.error("tools changed but cannot be used, keeping the old ones: %s", exc)
                    continue
                before = set(self.current.warnings)
                self._swap(runtime)
            logger.info("tools changed: %d tools", len(runtime.registry))
            for warning in runtime.warnings:
                if warning not in before:  # a tool a source now brings that is left out
                    logger.warning("tools: %s", warning)

    async def reload(self, every_worker: bool = False) -> Reloaded:
        """Read the configuration file again and swap in what it builds, or keep the
        old snapshot and say why. ``every_worker``: each worker process reloads itself
        (a watched file changed, and every worker sees it)."""
        async with self._reloading:
            result = await self._reload(every_worker)
        self._metrics.config_reloads.labels("ok" if result.ok else "error").inc()
        if result.ok:
            logger.info("configuration reloaded: %s", result.message)
            for warning in result.warnings:
                logger.warning("reload: %s", warning)
        else:
            logger.error("configuration not reloaded, the old one stays: %s", result.message)
        return result

    async def _reload(self, every_worker: bool) -> Reloaded:
        if self.config_path is None:
            return Reloaded(False, "this gateway was not started from a configuration file")
        if self.one_of_workers and not every_worker:
            return Reloaded(
                False,
                "this gateway runs several worker processes, and this request reached one: "
                "send SIGHUP to the main process instead (uvicorn starts fresh workers, "
                "which read the file)",
            )
        try:  # in a worker thread, and never waited on past READ_TIMEOUT_S
            async with asyncio.timeout(READ_TIMEOUT_S):
                config = await asyncio.to_thread(load_config, self.config_path)
                static = await asyncio.to_thread(static_tools, config)
        except (ConfigError, ToolConfigError) as exc:
            return Reloaded(False, str(exc))
        except TimeoutError:
            return Reloaded(
                False, f"reading the configuration took longer than {READ_TIMEOUT_S:g}s"
            )
        sources = self._sources
        plan = await sources.plan(config, START_WAIT_S) if sources is not None else None
        try:
            discovered = sources.tools(plan) if sources is not None else []
            runtime = await asyncio.to_thread(
                Runtime.build, config, static.tools, discovered, static.warnings
            )
        except ConfigError as exc:
            if sources is not None and plan is not None:
                await sources.discard(plan)
            return Reloaded(False, str(exc))
        self._redactor.extend(secrets_of(config))  # before anything can use them
        old = self.current.config
        if sources is not None and plan is not None:
            sources.adopt(plan)
        self._static = static
        self._swap(runtime)
        if sources is not None and plan is not None:
            await sources.close_dropped(plan)
        warnings = [*runtime.warnings, *(plan.warnings() if plan is not None else [])]
        unchanged = [
            name for name in _RESTART_SECTIONS if getattr(old, name) != getattr(config, name)
        ]
        if unchanged:
            warnings.append(f"{', '.join(unchanged)}: changes here take effect on restart")
        return Reloaded(True, f"{len(runtime.registry)} tools", len(runtime.registry), warnings)

    async def aclose(self) -> None:
        rebuilding, self._rebuilding = self._rebuilding, None
        if rebuilding is not None:
            rebuilding.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await rebuilding
        if self._sources is not None:
            await self._sources.aclose()


@contextlib.contextmanager
def reload_on_sighup(runtimes: Runtimes) -> Iterator[None]:
    """While the block runs, ``SIGHUP`` reloads the configuration (where the platform
    has it and this is the main thread, as under ``toolgate serve``)."""
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[Reloaded]] = set()

    def reload() -> None:
        task = loop.create_task(runtimes.reload())
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    try:
        loop.add_signal_handler(signal.SIGHUP, reload)
    except (AttributeError, NotImplementedError, RuntimeError, ValueError):
        yield  # no SIGHUP here (Windows), or not the main thread (tests' servers)
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGHUP)


def guardrail_labels(config: GatewayConfig) -> tuple[tuple[str, str], ...]:
    """The name and action of every configured guardrail, the gateway's and each
    tenant's (as the tenant's policy names them)."""
    found = {(rule.name, rule.action) for rule in config.policy.guardrails.rules}
    for tenant in config.tenants or []:
        guarding = guarding_of(config.policy.guardrails, tenant.policy.guardrails)
        found |= {(rule.name, rule.action) for rule in guarding.rules}
    return tuple(sorted(found))
