"""MCP servers as a tool source, against servers built with the official SDK on
loopback: both protocol revisions, paging, errors, a server that goes down and comes
back, a tool list that changes, the egress policy and header secrecy."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx
import pytest

from tests.support.mcp_servers import HeaderLog, LegacyOnly, tools_server
from tests.support.servers import ServerThread, free_port
from tool_registry import (
    CallContext,
    EgressPolicy,
    ToolExecutor,
    ToolRegistry,
    create_tool_transport,
)
from tool_registry.errors import EgressDenied
from tool_registry.sources.mcp import CHURN_CAP_S, McpServer, McpServerConfig, relist_after
from tool_registry.sources.mcp_transport import GuardedBackend

pytestmark = pytest.mark.anyio

SECRET = "mcp-secret-token-1234"
# MCP tools make no HTTP tool calls: the executor stands in as the runner they are given.
NO_HTTP = ToolExecutor(
    create_tool_transport(EgressPolicy(), inner=httpx.MockTransport(lambda r: httpx.Response(500)))
)


@pytest.fixture
def served() -> Iterator[tuple[ServerThread, HeaderLog]]:
    log = HeaderLog(tools_server().streamable_http_app())
    with ServerThread(log) as thread:
        yield thread, log


def config(url: str, **extra: object) -> McpServerConfig:
    return McpServerConfig.model_validate(
        {
            "name": "demo",
            "url": f"{url}/mcp",
            "headers": {"Authorization": f"Bearer {SECRET}"},
            "prefix": "demo_",
            "timeout_s": 5,
            **extra,
        }
    )


async def started(cfg: McpServerConfig, **options: object) -> McpServer:
    server = McpServer(cfg, EgressPolicy(), **options)  # type: ignore[arg-type]
    await server.start(wait_s=10)
    return server


async def test_current_revision_lists_every_page_and_calls(
    served: tuple[ServerThread, HeaderLog],
) -> None:
    thread, log = served
    server = await started(config(thread.url))
    try:
        assert server.state == "ready"
        assert server.protocol_version == "2026-07-28"
        names = [t.name for t in server.tools]
        assert names == [
            "demo_add",
            "demo_fail",
            "demo_files_read",
            "demo_big_number",
            "demo_slow",
            "demo_reveal",
        ]
        registry = ToolRegistry([], discovered=server.tools)
        add = registry.get("demo_add")
        assert add is not None
        assert add.source == "mcp"
        assert not add.side_effects  # the server marks it read-only
        assert registry.get("demo_fail").side_effects  # type: ignore[union-attr]
        call = add.prepare('{"a": 2, "b": "40"}', CallContext("acme"))  # "40" coerced
        result = await add.run(call, None, NO_HTTP)
        assert (result.outcome, result.content) == ("ok", "42")
        assert all(h.get("authorization") == f"Bearer {SECRET}" for h in log.seen)
        assert not any("mcp-session-id" in h for h in log.seen)  # no session: current revision
    finally:
        await server.aclose()


async def test_the_earlier_session_based_revision_works_too() -> None:
    guard = LegacyOnly(tools_server().streamable_http_app())
    log = HeaderLog(guard)
    with ServerThread(log) as thread:
        server = await started(config(thread.url))
        try:
            assert server.state == "ready"
            assert server.protocol_version not in (None, "2026-07-28")
            assert guard.refused >= 1  # it tried the current revision first
            tool = next(t for t in server.tools if t.remote_name == "files.read")
            result = await tool.run(tool.prepare('{"path": "/a"}', CallContext("t")), None, NO_HTTP)
            assert result.content == "contents of /a"
            assert any("mcp-session-id" in h for h in log.seen)  # the session it was given
        finally:
            await server.aclose()


async def test_is_error_and_protocol_errors_are_error_results(
    served: tuple[ServerThread, HeaderLog],
) -> None:
    thread, _ = served
    server = await started(config(thread.url))
    try:
        fail = next(t for t in server.tools if t.remote_name == "fail")
        result = await fail.run(fail.prepare('{"reason": "x"}', CallContext("t")), None, NO_HTTP)
        assert result.outcome == "tool_error"
        assert json.loads(result.content)["error"]  # an error object for the model
        gone = await server.call("no_such_tool", {}, None)
        assert gone.outcome == "tool_error"
        assert "no_such_tool" in json.loads(gone.content)["error"]
    finally:
        await server.aclose()


async def test_include_and_exclude_select_by_remote_or_registry_name(
    served: tuple[ServerThread, HeaderLog],
) -> None:
    thread, _ = served
    server = await started(config(thread.url, include=["add", "big_*"], exclude=["demo_add"]))
    try:
        assert [t.name for t in server.tools] == ["demo_big_number"]
        tool = server.tools[0]
        call = tool.prepare('{"n": 9007199254740993}', CallContext("t"))
        result = await tool.run(call, None, NO_HTTP)
        assert json.loads(result.content) == {"n": 9007199254740993}
    finally:
        await server.aclose()


async def test_a_server_down_at_start_is_retried_and_its_tools_appear() -> None:
    app = tools_server().streamable_http_app()
    port = free_port()  # nothing listens on it yet
    changes: list[int] = []
    cfg = config(f"http://127.0.0.1:{port}")
    server = McpServer(cfg, EgressPolicy(), lambda: changes.append(1), backoff_s=0.2)
    await server.start(wait_s=5)
    try:
        assert server.state == "down"
        assert server.tools == []  # the model sees none of its tools meanwhile
        assert "cannot be reached" in (server.last_error or "")
        missing = await server.call("add", {"a": 1, "b": 2}, None)
        assert "not reachable now" in missing.content
        with ServerThread(app, port=port):
            await _until(lambda: server.state == "ready")
            assert len(server.tools) == 6
            assert changes
    finally:
        await server.aclose()


async def test_a_server_that_goes_away_keeps_its_tools_and_reconnects() -> None:
    app = tools_server().streamable_http_app()
    with ServerThread(app) as thread:
        port = thread.port
        server = await started(config(thread.url), backoff_s=0.2)
    try:
        assert server.state == "ready"
        add = server.tools[0]
        result = await add.run(add.prepare('{"a": 1, "b": 1}', CallContext("t")), None, NO_HTTP)
        assert result.outcome == "http_error"  # the server is gone: an error result
        assert len(server.tools) == 6  # the last list stays
        with ServerThread(tools_server().streamable_http_app(), port=port):
            await _until(lambda: server.state == "ready" and server._client is not None)
            result = await add.run(add.prepare('{"a": 1, "b": 1}', CallContext("t")), None, NO_HTTP)
            assert result.content == "2"
    finally:
        await server.aclose()


async def test_a_changed_tool_list_is_seen_on_refresh() -> None:
    mcp = tools_server()
    with ServerThread(mcp.streamable_http_app()) as thread:
        changes: list[int] = []
        cfg = config(thread.url, refresh_s=0.2)
        server = McpServer(cfg, EgressPolicy(), lambda: changes.append(1))
        await server.start(wait_s=10)
        try:
            assert len(server.tools) == 6
            mcp.remove_tool("fail")

            @mcp.tool()
            def shout(text: str) -> str:
                """New."""
                return text.upper()

            await _until(lambda: "demo_shout" in [t.name for t in server.tools])
            assert "demo_fail" not in [t.name for t in server.tools]
            assert len(changes) == 2  # the first listing and the change
        finally:
            await server.aclose()


async def test_the_egress_policy_applies_to_the_server_url(
    served: tuple[ServerThread, HeaderLog],
) -> None:
    thread, log = served
    policy = EgressPolicy(deny_private=True)
    server = McpServer(config(thread.url), policy)
    await server.start(wait_s=5)
    try:
        assert server.state == "down"
        assert "egress" in (server.last_error or "")
        assert log.seen == []  # nothing reached it
    finally:
        await server.aclose()
    with pytest.raises(EgressDenied):
        await GuardedBackend(EgressPolicy()).connect_tcp("169.254.169.254", 80)
    with pytest.raises(EgressDenied):
        await GuardedBackend(EgressPolicy()).connect_tcp("2852039166", 80)


def test_config_refuses_bad_urls_and_header_values() -> None:
    with pytest.raises(ValueError, match="absolute http"):
        McpServerConfig(name="x", url="ftp://x/mcp")
    with pytest.raises(ValueError, match="printable ASCII"):
        McpServerConfig(name="x", url="http://x/mcp", headers={"a": "b\r\nc"})


async def _until(condition: object, seconds: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    ends = loop.time() + seconds
    while not condition():  # type: ignore[operator]
        if loop.time() > ends:
            raise AssertionError("the condition did not hold in time")
        await asyncio.sleep(0.05)


async def test_a_list_changed_notification_lists_again_at_once() -> None:
    mcp = tools_server()
    with ServerThread(LegacyOnly(mcp.streamable_http_app())) as thread:
        server = await started(config(thread.url, refresh_s=300))
        try:
            assert "demo_hidden_door" not in [t.name for t in server.tools]
            result = await server.call("reveal", {}, None)
            assert result.content == "revealed"
            await _until(lambda: "demo_hidden_door" in [t.name for t in server.tools], 5)
        finally:
            await server.aclose()


async def test_a_call_past_the_servers_timeout_is_a_result_past_the_callers_raises(
    served: tuple[ServerThread, HeaderLog],
) -> None:
    thread, _ = served
    server = await started(config(thread.url, timeout_s=0.3))
    try:
        result = await server.call("slow", {"seconds": 2}, None)
        assert result.outcome == "timeout"
        assert "timed out after 0.3s" in result.content
        deadline = asyncio.get_running_loop().time() + 0.1
        with pytest.raises(TimeoutError):  # the request's own time ran out first
            await server.call("slow", {"seconds": 2}, deadline)
        quick = await server.call("add", {"a": 1, "b": 2}, None)
        assert quick.content == "3"  # the connection is still good
    finally:
        await server.aclose()


async def test_big_integers_reach_an_mcp_server_digit_for_digit(
    served: tuple[ServerThread, HeaderLog],
) -> None:
    thread, _ = served
    server = await started(config(thread.url, include=["big_number"]))
    try:
        tool = server.tools[0]
        call = tool.prepare('{"n": 12345678901234567890123}', CallContext("t"))
        result = await tool.run(call, None, NO_HTTP)
        assert result.content == '{"n": 12345678901234567890123}'
    finally:
        await server.aclose()


@pytest.mark.parametrize(
    ("interval", "changed", "since", "wait"),
    [
        (0.2, False, 0.1, 0.2),  # quiet: min_relist_s
        (0.2, True, None, 0.2),  # the first change: min_relist_s
        (0.2, True, 0.2, 1.0),  # a change soon after the last: doubled, a second at least
        (1.0, True, 1.0, 2.0),
        (256.0, True, 256.0, CHURN_CAP_S),  # up to five minutes
        (CHURN_CAP_S, True, CHURN_CAP_S, CHURN_CAP_S),
        (8.0, True, 60.0, 0.2),  # a change long after the last: back to min_relist_s
        (8.0, False, 8.0, 0.2),  # a listing that found nothing new: back too
    ],
)
def test_a_list_that_keeps_changing_is_listed_less_often(
    interval: float, changed: bool, since: float | None, wait: float
) -> None:
    assert relist_after(interval, 0.2, changed, since) == wait
