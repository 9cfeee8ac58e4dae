"""An MCP server whose calls act as the user (docs/design.md §18): a session per user's
token, none without one, closed when idle, the least recently used closed past
``max_sessions``; a refused token is said without the token. The server (the SDK's,
on loopback) sits behind a guard that answers 401 to any request without a user's
token, and a log of the headers every request carried."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator

import pytest
from starlette.types import ASGIApp, Receive, Scope, Send

from tests.support.mcp_servers import HeaderLog, tools_server
from tests.support.servers import ServerThread
from tool_registry import PreparedCall
from tool_registry.sources.mcp import McpServer, McpServerConfig

from .test_mcp import config
from .test_mcp import started as source

pytestmark = pytest.mark.anyio


class UsersOnly:
    """401 for a request without ``Authorization: Bearer tok-<user>``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            if not headers.get(b"authorization", b"").startswith(b"Bearer tok-"):
                body = json.dumps({"error": "invalid_token"}).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"www-authenticate", b'Bearer error="invalid_token"')],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


@pytest.fixture
def served() -> Iterator[tuple[ServerThread, HeaderLog]]:
    log = HeaderLog(UsersOnly(tools_server().streamable_http_app()))
    with ServerThread(log) as thread:
        yield thread, log


async def started(url: str, **extra: object) -> McpServer:
    """The source of ``test_mcp``, calling as the user: no key of its own."""
    return await source(config(url, headers={}, auth={"connection": "desk"}, **extra))


def tokens_seen(log: HeaderLog) -> set[str]:
    return {h.get("authorization", "") for h in log.seen}


async def test_nothing_is_opened_until_a_user_calls_and_the_connect_tool_stands_in(
    served: tuple[ServerThread, HeaderLog],
) -> None:
    thread, log = served
    server = await started(thread.url)
    try:
        assert server.state == "ready"
        [stand_in] = server.offered
        assert stand_in.name == "demo_connect_demo"
        assert stand_in.connection == "desk"
        await asyncio.sleep(0.2)
        assert log.seen == []  # no session of its own: the gateway has no token for it
        result = await stand_in.run(PreparedCall(stand_in, {}, bearer="tok-alice"), None, None)  # type: ignore[arg-type]
        assert result.outcome == "ok"
        names = [t.name for t in server.offered]
        assert "demo_add" in names
        assert all(t.connection == "desk" for t in server.offered)
        assert tokens_seen(log) == {"Bearer tok-alice"}
    finally:
        await server.aclose()


async def test_each_users_calls_go_in_their_own_session_with_their_token(
    served: tuple[ServerThread, HeaderLog],
) -> None:
    thread, log = served
    server = await started(thread.url)
    try:
        alice = await server.call("add", {"a": 1, "b": 2}, None, bearer="tok-alice")
        bob = await server.call("add", {"a": 2, "b": 2}, None, bearer="tok-bob")
        assert (alice.content, bob.content) == ("3", "4")
        assert len(server.sessions) == 2
        calls = [h.get("authorization") for h in log.seen]
        assert set(calls) == {"Bearer tok-alice", "Bearer tok-bob"}
        again = await server.call("add", {"a": 1, "b": 1}, None, bearer="tok-alice")
        assert again.content == "2"
        assert len(server.sessions) == 2  # alice's session, used again
        anonymous = await server.call("add", {"a": 1, "b": 1}, None)
        assert anonymous.outcome == "tool_error"
    finally:
        await server.aclose()


async def test_the_least_recently_used_session_goes_first(
    served: tuple[ServerThread, HeaderLog],
) -> None:
    thread, _ = served
    # idle_s far beyond the test, so only the cap closes sessions (a loaded machine's slow
    # calls once let the idle close beat the count)
    server = await started(thread.url, idle_s=60.0, max_sessions=2)
    try:
        for user in ("a", "b", "c"):
            result = await server.call("add", {"a": 1, "b": 1}, None, bearer=f"tok-{user}")
            assert result.content == "2"
        assert len(server.sessions) == 2  # a's was closed for c's
    finally:
        await server.aclose()


async def test_an_idle_session_closes(
    served: tuple[ServerThread, HeaderLog],
) -> None:
    thread, _ = served
    server = await started(thread.url, idle_s=0.3)
    try:
        result = await server.call("add", {"a": 1, "b": 1}, None, bearer="tok-a")
        assert result.content == "2"
        for _ in range(200):
            if len(server.sessions) == 0:
                break
            await asyncio.sleep(0.05)
        assert len(server.sessions) == 0  # closed when idle
    finally:
        await server.aclose()


async def test_a_call_longer_than_idle_keeps_its_session_until_it_is_answered(
    served: tuple[ServerThread, HeaderLog],
) -> None:
    """Idle is counted from the end of the last call, not from its start: a session is
    never closed under a call using it."""
    thread, _ = served
    server = await started(thread.url, idle_s=0.3)
    try:
        result = await server.call("slow", {"seconds": 0.8}, None, bearer="tok-a")
        assert (result.outcome, result.content) == ("ok", "slept")
        assert len(server.sessions) == 1  # idle from now on, for idle_s
    finally:
        await server.aclose()


class Slow:
    """Every request answered ``seconds`` late: a session slower to open than idle_s."""

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await asyncio.sleep(self.seconds)
        await self.app(scope, receive, send)


async def test_a_session_slower_to_open_than_idle_is_not_closed_under_its_first_call() -> None:
    """The race behind a flaky test: the idle clock started when the session was asked
    for, so one whose opening took longer than ``idle_s`` (a loaded machine) was closed
    as it became ready, under the call about to use it ("Connection closed")."""
    app = Slow(UsersOnly(tools_server().streamable_http_app()), 0.2)
    with ServerThread(app) as thread:
        server = await started(thread.url, idle_s=0.3)
        try:
            for _ in range(3):
                result = await server.call("add", {"a": 1, "b": 1}, None, bearer="tok-a")
                assert (result.outcome, result.content) == ("ok", "2")
        finally:
            await server.aclose()


async def test_a_refused_token_is_said_without_the_token(
    served: tuple[ServerThread, HeaderLog],
) -> None:
    thread, _ = served
    server = await started(thread.url)
    try:
        result = await server.call("add", {"a": 1, "b": 1}, None, bearer="expired-SECRET-9")
        assert result.outcome == "http_error"
        assert "refused the user's authorization" in result.content
        assert "SECRET" not in result.content
        assert result.status == 401  # the gateway refreshes or forgets the user's grant
        assert len(server.sessions) == 0  # nothing kept of a failed session
    finally:
        await server.aclose()


def test_a_server_that_acts_as_the_user_sends_no_other_authorization() -> None:
    with pytest.raises(ValueError, match="no other Authorization"):
        McpServerConfig.model_validate(
            {
                "name": "demo",
                "url": "https://mcp.example/mcp",
                "headers": {"authorization": "Bearer operator-key"},
                "auth": {"connection": "desk"},
            }
        )


async def test_a_session_that_never_opens_waits_no_longer_than_the_caller() -> None:
    """A server that takes the connection and says nothing: the call ends at the
    caller's deadline, not at the server's 30 s timeout."""
    silent = socket.create_server(("127.0.0.1", 0))  # never accepted, never answered
    try:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        server = await started(url, timeout_s=30)
        loop = asyncio.get_running_loop()
        began = loop.time()
        with pytest.raises(TimeoutError):
            await server.call("add", {"a": 1, "b": 1}, began + 0.5, bearer="tok-alice")
        assert loop.time() - began < 5
        await server.aclose()
    finally:
        silent.close()
