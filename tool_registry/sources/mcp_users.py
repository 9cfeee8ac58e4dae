"""An MCP server whose calls act as the user (``auth: {connection}``, docs/design.md §18):
one session per user's token, opened with that token as ``Authorization: Bearer`` on
the first call that needs it and closed when idle (``idle_s``). No session is opened
with anyone else's token, and none without one: the gateway holds no key of its own
for such a server.

What the model sees: the tools the server listed the last time a user's session
listed them (a server's tools are taken to be the same for every user; a user's call
of one their session lacks gets the server's own refusal). Before any user has
connected, the server offers one tool in their place, ``connect_<server>``: calling it
gives the user the link to connect (as any call as the user does without a grant), and
once they have, it lists the server's tools, which are offered from the next request
on.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from typing import Protocol

from mcp import Client

from tool_registry.logfields import FIELDS
from tool_registry.registry import tool_name
from tool_registry.results import ToolResult, error_result
from tool_registry.tool import Effects, HttpRunner, PreparedCall, Tool, Trust

logger = logging.getLogger("tool_registry.mcp")


class _Settings(Protocol):
    @property
    def prefix(self) -> str: ...

    @property
    def idle_s(self) -> float: ...

    @property
    def max_sessions(self) -> int: ...


class SessionServer(Protocol):
    """What users' sessions need of their server (``sources.mcp.McpServer``)."""

    @property
    def name(self) -> str: ...

    @property
    def config(self) -> _Settings: ...

    @property
    def connection(self) -> str | None: ...

    @property
    def sessions(self) -> UserSessions: ...

    def connect(
        self, headers: Mapping[str, str] | None = None, statuses: list[int] | None = None
    ) -> AbstractAsyncContextManager[Client]: ...

    def listing_due(self) -> bool: ...

    async def list_tools(self, client: Client) -> bool: ...

    def failure(self, exc: BaseException, statuses: list[int]) -> str: ...


class SessionUnavailable(Exception):
    """A user's session could not be opened; the message says why (never the token),
    ``status`` the HTTP status that refused it, where one did."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(slots=True)
class _Session:
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    client: Client | None = None
    error: str | None = None
    status: int | None = None  # the HTTP status that refused it
    used: float = 0.0  # when its last call ended (or its last lease was taken)
    task: asyncio.Task[None] | None = None
    leases: int = 0  # calls using it now: it is not idle while any is


class UserSessions:
    """One server's sessions, by a digest of the token each was opened with."""

    def __init__(self, server: SessionServer) -> None:
        self._server = server
        self._sessions: OrderedDict[str, _Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    @contextlib.asynccontextmanager
    async def lease(self, bearer: str) -> AsyncIterator[Client]:
        """The session of ``bearer``'s user, opened (and its tools listed) if need be,
        held for the block: a session is idle (and closed after ``idle_s``) only while no
        call holds it, counted from the end of the last one, so however long opening it
        or a call takes, it is not closed under a call about to use it or using it."""
        key = hashlib.sha256(bearer.encode()).hexdigest()
        loop = asyncio.get_running_loop()
        session = self._sessions.get(key)
        if session is None:
            while len(self._sessions) >= self._server.config.max_sessions:
                _, oldest = self._sessions.popitem(last=False)  # the least recently used
                if oldest.task is not None:
                    oldest.task.cancel()
            session = _Session(used=loop.time())
            self._sessions[key] = session
            session.task = asyncio.create_task(
                self._hold(key, bearer, session), name=f"mcp:{self._server.name}:user"
            )
        self._sessions.move_to_end(key)
        session.leases += 1
        try:
            await session.ready.wait()
            if session.client is None:
                raise SessionUnavailable(session.error or "the session ended", session.status)
            yield session.client
        finally:
            session.leases -= 1
            session.used = loop.time()

    async def _hold(self, key: str, bearer: str, session: _Session) -> None:
        """Open the session, list the tools if they are due, then keep it until idle."""
        server, loop = self._server, asyncio.get_running_loop()
        statuses: list[int] = []
        try:
            async with server.connect({"authorization": f"Bearer {bearer}"}, statuses) as client:
                if server.listing_due():
                    await server.list_tools(client)
                session.client = client
                session.ready.set()
                idle_s = server.config.idle_s
                while session.leases or (idle := loop.time() - session.used) < idle_s:  # noqa: ASYNC110 (a deadline that moves, not an event)
                    await asyncio.sleep(idle_s if session.leases else idle_s - idle)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            session.error = server.failure(exc, statuses)
            session.status = next((s for s in statuses if s in (401, 403)), None)
            logger.warning(
                "MCP server %s: a user's session failed: %s",
                server.name,
                session.error,
                extra={FIELDS: {"mcp_server": server.name, "outcome": "down"}},
            )
        finally:
            session.client = None
            session.ready.set()
            if self._sessions.get(key) is session:
                del self._sessions[key]

    async def aclose(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), OrderedDict()
        tasks = [s.task for s in sessions if s.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(task), 1.0)


def connect_tool_name(prefix: str, server: str) -> str:
    return tool_name(prefix, "connect_" + re.sub(r"[^A-Za-z0-9_-]", "_", server))


class McpConnectTool(Tool):
    """The stand-in for a user-bound server's tools before any user has connected."""

    __slots__ = ("_server",)

    def __init__(self, server: SessionServer) -> None:
        name = server.name
        super().__init__(
            connect_tool_name(server.config.prefix, name),
            f"Connect the user's own account at {name} (an MCP server). Its tools are "
            "offered once the user has connected: call this when the user asks for "
            f"something {name} does.",
            {"type": "object", "properties": {}},
            source="mcp",
            origin=f"MCP server {name!r}: its tools, once a user connects",
            label=f"mcp:{name}",
        )
        self._server = server

    @property
    def effects(self) -> Effects:
        return "read"

    @property
    def output(self) -> Trust:
        return "trusted"

    @property
    def connection(self) -> str | None:
        return self._server.connection

    async def run(self, call: PreparedCall, deadline: float | None, http: HttpRunner) -> ToolResult:
        if call.bearer is None:  # the runner gives the link before a call gets here
            return error_result("the user has not connected", "tool_error")
        try:
            async with self._server.sessions.lease(call.bearer):
                pass
        except SessionUnavailable as exc:
            failed = error_result(f"the MCP server {self._server.name!r}: {exc}", "http_error")
            return replace(failed, status=exc.status)
        return ToolResult(
            f"The user is connected to {self._server.name}: its tools are offered from the "
            "next request on.",
            "ok",
        )
