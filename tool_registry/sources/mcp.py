"""MCP servers as a tool source (docs/design.md §12), through the official ``mcp`` SDK.

``McpServer`` keeps one connection to one server (streamable HTTP) in a background
task: it negotiates the protocol revision (the current one, else the earlier
session-based one: ``Client(mode="auto")``), lists the tools page by page, lists them
again when the server says the list changed or every ``refresh_s``, and reconnects
with backoff when the server is down. Its ``McpTool``s are ordinary tools to the
registry: their calls go out on that connection.

What the model sees meanwhile: a server that has never answered contributes no tools;
one that answered once keeps its last list, and a call while it is unreachable is an
error result saying so (and makes the connection start again).

A server's list is as hostile as a model's arguments: relists are debounced (at most
one per ``min_relist_s``, however many ``list_changed`` notifications arrive), a list
that changes at every listing is listed less and less often (``relist_after``), at most
``max_tools`` are taken, the tools are built (schemas judged, validators made) in a
worker thread, and a tool whose schema ``schemas.schema_problem`` refuses is left out
by the registry with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import replace
from typing import Any, cast

import httpx2
import mcp_types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from tool_registry.egress import EgressPolicy, egress_denial
from tool_registry.jsonio import dumps_text
from tool_registry.logfields import FIELDS
from tool_registry.redact import Redactor
from tool_registry.registry import tool_name
from tool_registry.results import ToolResult, cut, cut_result, error_result
from tool_registry.retry import Backoff
from tool_registry.spec import AuthSpec, HttpSpec
from tool_registry.tool import Effects, HttpRunner, PreparedCall, Tool, Trust

from .mcp_transport import guarded_client
from .mcp_users import McpConnectTool, SessionUnavailable, UserSessions

logger = logging.getLogger("tool_registry.mcp")

_MAX_PAGES = 1000  # of a tools/list, at most (a cursor may never end)
_LISTED_PER_TOOL = 4  # tools listed, at most, per tool ``max_tools`` lets in
_MAX_DESCRIPTION = 1024
_BACKOFF_CAP_S = 60.0
# A server whose list changes at every listing (hostile, or broken) is listed less and
# less often, up to this: each change rebuilds the registry and its index (about half a
# CPU-second with a large catalog), which such a server would ask for forever.
CHURN_CAP_S = 300.0


def relist_after(interval: float, base: float, changed: bool, since_change: float | None) -> float:
    """The least wait before the next listing: ``base`` (``min_relist_s``) while the list
    is quiet, doubled (up to ``CHURN_CAP_S``) for each listing that changed it soon after
    the last change (``since_change``: seconds since that one, None for none)."""
    if not changed:
        return base
    if since_change is None or since_change > 2 * max(interval, base, 1.0):
        return base
    return min(max(interval * 2, base, 1.0), CHURN_CAP_S)


_CLIENT = mcp_types.Implementation(name="toolgate", version="0.1.0")


class McpServerConfig(BaseModel):
    """One ``mcp:`` entry of the configuration."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    url: str
    headers: dict[str, str] = Field(default_factory=dict)  # secrets: never shown
    prefix: str = ""
    include: list[str] = Field(default_factory=list)  # globs; empty: every tool
    exclude: list[str] = Field(default_factory=list)
    timeout_s: float = Field(default=30.0, gt=0, le=3600)  # per call and per listing
    refresh_s: float = Field(default=300.0, gt=0)  # list again this often
    max_chars: int = Field(default=16000, gt=0)  # of a result the model reads
    # At most this many tools are taken from the server: its list is not ours to trust,
    # and every tool is a metric series.
    max_tools: int = Field(default=256, gt=0, le=10000)
    # However often the server says its list changed, it is listed at most this often.
    min_relist_s: float = Field(default=1.0, ge=0, le=3600)
    # Calls carry the W3C traceparent of their span in ``params._meta`` (as MCP's
    # SEP-414 has it) when the gateway traces.
    trace_context: bool = True
    # Calls act as the user (docs/design.md §18): each user's session carries their token
    # for this connection; the gateway opens none of its own.
    auth: AuthSpec | None = None
    idle_s: float = Field(default=300.0, gt=0, le=86400)  # a user's session, idle, closes
    max_sessions: int = Field(default=1000, gt=0, le=100_000)  # users' sessions at once

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        return HttpSpec(url=url).url  # an absolute http(s) URL, as for HTTP tools

    @field_validator("headers")
    @classmethod
    def _headers(cls, headers: dict[str, str]) -> dict[str, str]:
        return HttpSpec(url="http://x.invalid/", headers=headers).headers

    @model_validator(mode="after")
    def _one_authorization(self) -> McpServerConfig:
        if self.auth is not None and any(k.lower() == "authorization" for k in self.headers):
            raise ValueError("a server whose calls act as the user sends no other Authorization")
        return self

    def selects(self, remote: str, name: str) -> bool:
        def hit(patterns: list[str]) -> bool:
            return any(fnmatch.fnmatchcase(n, p) for p in patterns for n in (remote, name))

        return (not self.include or hit(self.include)) and not hit(self.exclude)


class McpTool(Tool):
    """One tool of an MCP server."""

    __slots__ = ("_open_world", "_read_only", "_server", "remote_name")

    def __init__(self, server: McpServer, remote: mcp_types.Tool, name: str) -> None:
        schema = dict(remote.input_schema) if isinstance(remote.input_schema, dict) else {}
        schema.setdefault("type", "object")
        description = remote.description or remote.title or ""
        if len(description) > _MAX_DESCRIPTION:
            description = description[: _MAX_DESCRIPTION - 1] + "…"
        super().__init__(
            name,
            description,
            schema,
            source="mcp",
            origin=f"MCP server {server.name!r}: tool {remote.name!r}",
            label=f"mcp:{server.name}",
            returns=remote.output_schema if isinstance(remote.output_schema, dict) else None,
        )
        self._server = server
        self.remote_name = remote.name
        # The server's hints, read as the MCP specification defaults them: a tool writes
        # unless it says it only reads, and reaches an open world unless it says it
        # does not. They are the server's word: an operator's policy rules override them.
        annotations = remote.annotations
        self._read_only = annotations is not None and annotations.read_only_hint is True
        self._open_world = annotations is None or annotations.open_world_hint is not False

    @property
    def effects(self) -> Effects:
        return "read" if self._read_only else "write"

    @property
    def output(self) -> Trust:
        return "untrusted" if self._open_world else "trusted"

    @property
    def connection(self) -> str | None:
        return self._server.connection

    async def run(self, call: PreparedCall, deadline: float | None, http: HttpRunner) -> ToolResult:
        return await self._server.call(
            self.remote_name, call.arguments, deadline, http.redactor, call.trace, call.bearer
        )


def result_text(result: mcp_types.CallToolResult) -> str:
    """What the model reads of a call's result: its text, structured content as JSON
    when there is no text, other content named by kind."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
            parts.append(f"[{block.type}: {block.mime_type}]")
        elif isinstance(block, mcp_types.ResourceLink):
            parts.append(f"[resource: {block.uri}]")
        elif isinstance(block, mcp_types.EmbeddedResource):
            resource = block.resource
            text = getattr(resource, "text", None)
            parts.append(text if isinstance(text, str) else f"[resource: {resource.uri}]")
    if not parts and result.structured_content is not None:
        parts.append(dumps_text(result.structured_content))
    return "\n".join(parts)


class McpServer:
    """One MCP server: its connection, kept in a background task, and its tools."""

    def __init__(
        self,
        config: McpServerConfig,
        policy: EgressPolicy,
        on_change: Callable[[], None] = lambda: None,
        *,
        backoff_s: float = 1.0,
    ) -> None:
        self.config = config
        self.name = config.name
        self._policy = policy
        self._on_change = on_change
        self._backoff_s = backoff_s
        self.tools: list[McpTool] = []
        self.state = "connecting"  # connecting | ready | down
        self.protocol_version: str | None = None
        self.last_error: str | None = None
        self._client: Client | None = None
        self._wake = asyncio.Event()
        self._broken = False
        self._tried = asyncio.Event()  # set once the first attempt has ended either way
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._listed_at: float | None = None  # loop time of the last listing
        self.sessions = UserSessions(self)  # users' own, where calls act as the user

    @property
    def connection(self) -> str | None:
        """The connection whose user's token its calls carry, if they act as the user."""
        return self.config.auth.connection if self.config.auth is not None else None

    @property
    def offered(self) -> list[Tool]:
        """Its tools as the registry takes them: those listed, or, for a server whose
        calls act as the user and that no user's session has listed yet, the tool
        that connects the user."""
        if self.tools or self.connection is None:
            return list(self.tools)
        return [McpConnectTool(self)]

    async def start(self, wait_s: float | None = None) -> None:
        """Connect in the background; wait up to ``wait_s`` for the first listing. A
        server whose calls act as the user is not connected to until a user's call:
        it offers its ``connect_`` tool until a user's session lists its tools."""
        if self.connection is not None:
            self.state = "ready"
            self._tried.set()
            return
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"mcp:{self.name}")
        if wait_s:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await self._tried.wait()

    async def aclose(self) -> None:
        """Stop the connection task. (The SDK's cancel scopes may absorb a cancellation
        that lands inside them: the task stops at its next turn in any case.)"""
        self._stopping = True
        await self.sessions.aclose()
        task, self._task = self._task, None
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task], timeout=1.0)
        if task is not None and not task.cancelled():
            task.exception()  # retrieved: it ended as it should

    def refresh(self) -> None:
        """List the tools again now (the server said they changed)."""
        self._wake.set()

    @contextlib.asynccontextmanager
    async def connect(
        self, headers: Mapping[str, str] | None = None, statuses: list[int] | None = None
    ) -> AsyncIterator[Client]:
        """A session with the server: its configured headers, and ``headers`` (a user's
        token) on top; its responses' statuses noted in ``statuses`` where given."""
        config = self.config
        sent = {**config.headers, **(headers or {})}
        async with (
            guarded_client(self._policy, sent, config.timeout_s, statuses) as http,
            Client(
                streamable_http_client(config.url, http_client=http),
                mode="auto",
                read_timeout_seconds=config.timeout_s,
                message_handler=self._message,
                client_info=_CLIENT,
                cache=None,
            ) as client,
        ):
            yield client

    async def _message(self, message: Any) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            self.refresh()

    async def _run(self) -> None:
        backoff = Backoff(self._backoff_s, _BACKOFF_CAP_S)
        while not self._stopping:
            try:
                # The handshake and every request are bounded by ``timeout_s``.
                async with self.connect() as client:
                    self._client, self._broken = client, False
                    try:
                        self.protocol_version = client.protocol_version
                        await self.list_tools(client)
                        self.state, self.last_error = "ready", None
                        backoff.reset()
                        self._tried.set()
                        await self._serve(client)
                    finally:
                        self._client = None
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # an unreachable or broken server: try again later
                if self._stopping:
                    return
                self.state, self.last_error = "down", describe_failure(exc)
                logger.warning(
                    "MCP server %s: %s; trying again in %gs",
                    self.name,
                    self.last_error,
                    backoff.delay,
                    extra={FIELDS: {"mcp_server": self.name, "outcome": "down"}},
                )
            self._tried.set()
            await backoff.wait()

    async def _serve(self, client: Client) -> None:
        """List again when asked or every ``refresh_s``, until the connection breaks;
        never sooner than ``min_relist_s`` after the last listing (a storm of
        ``list_changed`` notifications is one relist)."""
        loop = asyncio.get_running_loop()
        listed = loop.time()
        base = self.config.min_relist_s
        interval, changed_at = base, None
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.refresh_s):
                    await self._wake.wait()
            if not self._broken:
                await asyncio.sleep(max(0.0, listed + interval - loop.time()))
            self._wake.clear()
            if self._broken or self._stopping:
                return
            changed = await self.list_tools(client)
            listed = loop.time()
            since = None if changed_at is None else listed - changed_at
            wider = relist_after(interval, base, changed, since)
            if wider > interval and wider > base:
                logger.warning(
                    "MCP server %s changes its tool list at every listing: listing it at "
                    "most every %gs",
                    self.name,
                    wider,
                    extra={FIELDS: {"mcp_server": self.name, "outcome": "churning"}},
                )
            interval = wider
            changed_at = listed if changed else changed_at

    def listing_due(self) -> bool:
        """Whether a user's new session should list the tools (none yet, or stale)."""
        listed = self._listed_at
        return listed is None or asyncio.get_running_loop().time() - listed > self.config.refresh_s

    def failure(self, exc: BaseException, statuses: list[int]) -> str:
        """What a failed session says (never a token)."""
        if 401 in statuses or 403 in statuses:
            status = 401 if 401 in statuses else 403
            return f"it refused the user's authorization (HTTP {status}): connect again"
        return describe_failure(exc)

    async def list_tools(self, client: Client) -> bool:
        """List the server's tools on ``client`` and make them the ones offered; whether
        they changed."""
        self._listed_at = asyncio.get_running_loop().time()
        remote: list[mcp_types.Tool] = []
        cursor: str | None = None
        async with asyncio.timeout(self.config.timeout_s):
            for _ in range(_MAX_PAGES):
                page = await client.list_tools(cursor=cursor, cache_mode="refresh")
                remote += page.tools
                cursor = page.next_cursor
                # Enough read for ``max_tools`` after ``include``/``exclude``: a list
                # that goes on is not read to its end.
                if not cursor or len(remote) > _LISTED_PER_TOOL * self.config.max_tools:
                    break
        # Judging and building what may be hundreds of large schemas is CPU work.
        tools = await asyncio.to_thread(self._tools_of, remote)
        before = [(t.name, t.definition, t.effects, t.output) for t in self.tools]
        if before == [(t.name, t.definition, t.effects, t.output) for t in tools]:
            return False
        self.tools = tools
        self._on_change()
        return True

    def _tools_of(self, remote: list[mcp_types.Tool]) -> list[McpTool]:
        config = self.config
        tools: list[McpTool] = []
        for item in remote:
            name = tool_name(config.prefix, item.name)
            if not config.selects(item.name, name):
                continue
            if len(tools) == config.max_tools:
                logger.warning(
                    "MCP server %s lists %d tools; the first %d are used (max_tools)",
                    self.name,
                    len(remote),
                    config.max_tools,
                    extra={FIELDS: {"mcp_server": self.name}},
                )
                break
            tool = McpTool(self, item, name)
            tool.schema_problem  # noqa: B018 (judged here, off the event loop, and kept)
            tools.append(tool)
        return tools

    async def call(
        self,
        remote_name: str,
        arguments: dict[str, Any],
        deadline: float | None,
        redactor: Redactor | None = None,
        trace: Mapping[str, str] | None = None,
        bearer: str | None = None,
    ) -> ToolResult:
        """Call a tool. Trouble is an error result; the caller's ``deadline`` (loop time)
        passing raises ``TimeoutError``. ``trace`` (W3C headers) goes in the request's
        ``_meta`` unless the server's ``trace_context`` is off. ``bearer``: the user's
        token, where calls act as the user (their own session)."""
        if self.connection is None:
            return await self._call_on(
                self._client,
                remote_name,
                arguments,
                deadline=deadline,
                redactor=redactor,
                trace=trace,
                users=False,
            )
        if bearer is None:
            return error_result("the call needs the user's connection", "tool_error")
        try:
            async with contextlib.AsyncExitStack() as held:
                async with asyncio.timeout_at(deadline):  # the caller's time bounds the wait
                    client = await held.enter_async_context(self.sessions.lease(bearer))
                # The session is the call's until it is answered: never closed as idle
                # under it (the lease).
                return await self._call_on(
                    client,
                    remote_name,
                    arguments,
                    deadline=deadline,
                    redactor=redactor,
                    trace=trace,
                    users=True,
                )
        except SessionUnavailable as exc:
            failed = error_result(f"the MCP server {self.name!r}: {exc}", "http_error")
            return replace(failed, status=exc.status)

    async def _call_on(
        self,
        client: Client | None,
        remote_name: str,
        arguments: dict[str, Any],
        *,
        deadline: float | None,
        redactor: Redactor | None,
        trace: Mapping[str, str] | None,
        users: bool,
    ) -> ToolResult:
        """``call`` on ``client`` (``users``: a user's own session)."""
        if client is None:
            message = f"the MCP server {self.name!r} is not reachable now (the gateway retries)"
            return error_result(message, "http_error")
        loop = asyncio.get_running_loop()
        ends = loop.time() + self.config.timeout_s
        callers = deadline is not None and deadline <= ends
        try:
            async with asyncio.timeout_at(ends if deadline is None else min(ends, deadline)):
                meta = (
                    cast(mcp_types.RequestParamsMeta, dict(trace))
                    if trace and self.config.trace_context
                    else None
                )
                result = await client.call_tool(remote_name, arguments, meta=meta)
        except TimeoutError:
            if callers:
                raise
            return error_result(f"the tool timed out after {self.config.timeout_s:g}s", "timeout")
        except MCPError as exc:
            if exc.code == mcp_types.CONNECTION_CLOSED and not users:
                return self._lost(exc)
            message = f"the MCP server refused the call: {exc.error.message}"
            return replace(error_result(message, "tool_error"), code=str(exc.code))
        except ValidationError:
            return error_result("the MCP server answered with an invalid result", "tool_error")
        except Exception as exc:
            if users:  # a user's session: the next call opens another
                return error_result(
                    f"the MCP server {self.name!r} could not be reached", "http_error"
                )
            return self._lost(exc)
        text = result_text(result)
        if result.is_error:
            said = cut(text, self.config.max_chars, redactor or Redactor(()))
            return error_result(said or "the tool reported an error", "tool_error")
        return cut_result(text, self.config.max_chars, redactor or Redactor(()))

    def _lost(self, exc: BaseException) -> ToolResult:
        """The connection broke under a call: start it again; the call's result says so."""
        if not self._broken:
            self._broken = True
            self._wake.set()
            logger.warning(
                "MCP server %s: call failed: %s",
                self.name,
                describe_failure(exc),
                extra={FIELDS: {"mcp_server": self.name, "outcome": "http_error"}},
            )
        return error_result(f"the MCP server {self.name!r} could not be reached", "http_error")


def describe_failure(exc: BaseException) -> str:
    """A short, secret-free reason for a failed connection or call."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    denial = egress_denial(exc)
    if denial is not None:
        return f"refused by the egress policy ({denial})"
    if isinstance(exc, MCPError):
        return f"protocol error {exc.code}: {exc.error.message}"
    if isinstance(exc, httpx2.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    if isinstance(exc, TimeoutError | httpx2.TimeoutException):
        return "no answer in time"
    if isinstance(exc, httpx2.HTTPError | OSError):
        return f"cannot be reached ({type(exc).__name__})"
    return type(exc).__name__
