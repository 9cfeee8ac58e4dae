"""Hostile far sides and a watch on the gateway's event loop.

``HostileMcp`` is an MCP server built with the official SDK that advertises whatever
tool list a test hands it (schemas with remote ``$ref``s, catastrophic patterns,
thousands of properties), answers every call with its arguments, counts its listings
and can send a storm of ``list_changed`` notifications. ``LoopWatch`` runs a ticker on
a running server's event loop and keeps the longest gap between its ticks: a loop
blocked by a validation or a rebuild shows as a long gap.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import threading
import time
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import (
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
)

from tests.support.servers import ServerThread

TICK_S = 0.005


class HostileMcp(MCPServer):
    """Lists ``advertised`` (plus its own ``storm`` tool); every advertised name answers
    with the arguments it received, as JSON."""

    def __init__(self, advertised: list[Tool], churn: bool = False) -> None:
        super().__init__("hostile")
        self.advertised = advertised
        self.churn = churn  # each listing differs from the last, and says so at once
        self.listed_at: list[float] = []  # monotonic, each listing's
        self.listings = 0
        self.received: list[dict[str, Any]] = []
        self._lock = threading.Lock()

        @self.tool()
        async def storm(times: int, ctx: Context) -> str:
            """Says the tool list changed ``times`` times, as fast as it can."""
            for _ in range(times):
                await ctx.session.send_tool_list_changed()
            return "stormed"

    async def _handle_call_tool(self, ctx: Any, params: CallToolRequestParams) -> Any:
        if params.name not in {tool.name for tool in self.advertised}:
            return await super()._handle_call_tool(ctx, params)
        arguments = dict(params.arguments or {})
        with self._lock:
            self.received.append(arguments)
        return CallToolResult(content=[TextContent(type="text", text=json.dumps(arguments))])

    async def _handle_list_tools(self, ctx: Any, params: PaginatedRequestParams | None) -> Any:
        with self._lock:
            self.listings += 1
            self.listed_at.append(time.monotonic())
            listing = self.listings
        own = await self.list_tools()
        advertised = self.advertised
        if self.churn:  # a new description each time, and a notice that it changed
            advertised = [t.model_copy(update={"description": f"v{listing}"}) for t in advertised]
            await ctx.session.send_tool_list_changed()
        return ListToolsResult(tools=[*advertised, *(t for t in own if t.name == "storm")])


def advertised(name: str, schema: dict[str, Any]) -> Tool:
    return Tool(name=name, description=f"{name}.", input_schema=schema)


def _schedstat(task: str) -> tuple[int, int] | None:
    """A thread's time on a CPU and time waiting for one (ns), as Linux counts them."""
    try:
        with open(f"/proc/self/task/{task}/schedstat") as stat:
            ran, waited, _ = stat.read().split()
    except (OSError, ValueError):
        return None
    return int(ran), int(waited)


def _threads() -> dict[str, tuple[int, int]]:
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return {}
    return {task: found for task in tasks if (found := _schedstat(task)) is not None}


class LoopWatch:
    """The longest time a server's event loop went without running a ticker task, less
    what a crowded machine took (Linux's scheduler statistics: the time the loop's
    thread, and the process's other threads, waited for a CPU): a loaded CI runner's
    gaps are not the gateway's, while a gap its own work made — on the loop, or in
    another thread holding the GIL — is counted whole; where the loop's thread ran the
    whole gap, that is counted whatever else waited. Without those statistics, the gap
    is counted in the time this process ran."""

    def __init__(self, server: ServerThread) -> None:
        self._server = server
        self.longest = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        own = str(threading.get_native_id())
        last, last_cpu, before = loop.time(), time.process_time(), _threads()
        while True:
            await asyncio.sleep(TICK_S)
            now, cpu, after = loop.time(), time.process_time(), _threads()
            if own in after and own in before:
                ran = (after[own][0] - before[own][0]) / 1e9
                waited = sum(
                    (after[t][1] - before[t][1]) / 1e9 for t in after.keys() & before.keys()
                )
                gap = max(ran, now - last - waited) - TICK_S
            else:
                gap = min(now - last, cpu - last_cpu) - TICK_S
            self.longest = max(self.longest, gap)
            last, last_cpu, before = now, cpu, after

    def __enter__(self) -> LoopWatch:
        async def start() -> None:
            self._task = asyncio.create_task(self._tick())

        # What lives now is frozen out of the collector's walks while the watch runs, as
        # ``toolgate serve`` freezes what it built before serving (gateway/ops/
        # gc_tuning.py): here that is pytest's heap and every earlier test's, and one
        # full collection of it paused every thread for about 0.1 s, however little
        # the gateway had made. Its unfrozen objects are collected as ever.
        gc.collect()
        gc.freeze()
        self._server.call(start)
        return self

    def __exit__(self, *exc_info: object) -> None:
        async def stop() -> None:
            if self._task is not None:
                self._task.cancel()

        try:
            self._server.call(stop)
        finally:
            gc.unfreeze()
