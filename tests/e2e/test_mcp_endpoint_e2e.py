"""The registry as an MCP server (``POST /mcp``), driven by the official MCP client as
two tenants, in both protocol revisions: each sees and calls only its own tools, with
its bind values, rate limit, metrics and traces; the tool server records what it got."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from gateway.surfaces.mcp_server import TOOLS_PAGE
from tests.support.recorder import Answer, Received, Recorder
from tests.support.scripted import MODEL, OTHER_KEY, TENANT_KEY, Harness
from tests.support.servers import ServerThread

LIMITED_KEY = "sk-tenant-gamma-CANARY-0020"


def tool_answer(hit: Received) -> Answer:
    return Answer(body=json.dumps({"path": hit.raw_path, "name": "Ada"}).encode())


def start(
    harness: Harness, answer: Any = tool_answer, policy: dict[str, Any] | None = None
) -> tuple[ServerThread, Recorder]:
    tools = Recorder(answer)
    url = harness.serve(tools).url
    config: dict[str, Any] = {
        "upstreams": [{"name": "up", "base_url": "http://127.0.0.1:9/v1"}],
        "models": [{"name": MODEL, "upstream": "up"}],
        "tools": [
            {
                "name": "lookup",
                "description": "Looks a customer up.",
                "parameters": {
                    "type": "object",
                    "properties": {"id": {"type": "string"}, "tenant": {"type": "string"}},
                    "required": ["id"],
                },
                "bind": {"tenant": "{tenant.id}", "user": "{header.x-toolgate-user}"},
                "http": {
                    "url": f"{url}/{{tenant}}/customers/{{id}}",
                    "headers": {"x-user": "{user}"},
                },
            },
            {
                "name": "notes",
                "description": "Writes a note.",
                "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
                "http": {"method": "POST", "url": f"{url}/notes"},
            },
        ],
        "tenants": [
            {"id": "acme", "keys": [TENANT_KEY], "tools": ["lookup", "notes"]},
            {"id": "beta", "keys": [OTHER_KEY], "tools": ["notes"]},
            {
                "id": "gamma",
                "keys": [LIMITED_KEY],
                "tools": ["notes"],
                "limits": {"requests_per_minute": 2},
            },
        ],
    }
    if policy is not None:
        config["policy"] = policy
    return harness.gateway(config), tools


async def session(url: str, key: str, mode: str, user: str = "u-7") -> Any:
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {key}", "x-toolgate-user": user})
    client = Client(streamable_http_client(f"{url}/mcp", http_client=http), mode=mode)
    return http, client


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_each_tenant_lists_and_calls_only_its_own_tools(harness: Harness, mode: str) -> None:
    gateway, tools = start(harness)

    async def scenario() -> None:
        http, client = await session(gateway.url, TENANT_KEY, mode)
        async with http, client:
            assert (client.protocol_version == "2026-07-28") == (mode == "auto")
            listed = (await client.list_tools()).tools
            assert [t.name for t in listed] == ["lookup", "notes"]
            lookup = listed[0]
            assert set(lookup.input_schema["properties"]) == {"id"}  # bound ones hidden
            assert lookup.annotations is not None
            assert lookup.annotations.read_only_hint
            result = await client.call_tool("lookup", {"id": "c/1", "tenant": "beta"})
            assert not result.is_error
            assert json.loads(result.content[0].text)["name"] == "Ada"

        http, client = await session(gateway.url, OTHER_KEY, mode)
        async with http, client:
            assert [t.name for t in (await client.list_tools()).tools] == ["notes"]
            refused = await client.call_tool("lookup", {"id": "c/1"})
            assert refused.is_error
            text = refused.content[0].text
            assert "not available" in text
            assert "lookup" not in text.split("Available tools:")[1]  # acme's tools unnamed

    asyncio.run(scenario())
    lookups = [h for h in tools.hits if "/customers/" in h.raw_path]
    assert len(lookups) == 1  # beta's call never left the gateway
    assert lookups[0].raw_path == "/acme/customers/c%2F1"  # bound tenant, not the caller's
    assert lookups[0].headers["x-user"] == "u-7"


def test_a_result_served_over_mcp_is_screened_as_a_loops_is(harness: Harness) -> None:
    """/mcp runs calls through the same runner: the result enters through the policy
    point, and the MCP client reads it redacted."""
    key = "AKIAIOSFODNN7EXAMPLE"
    leaky = Answer(body=json.dumps({"name": "Ada", "note": f"key {key}"}).encode())
    rule = {"name": "no-secrets", "detect": ["secrets"], "action": "redact"}
    gateway, _ = start(harness, lambda hit: leaky, {"guardrails": {"rules": [rule]}})

    async def scenario() -> str:
        http, client = await session(gateway.url, TENANT_KEY, "auto")
        async with http, client:
            result = await client.call_tool("lookup", {"id": "c1"})
            return str(result.content[0].text)

    text = asyncio.run(scenario())
    assert key not in text
    assert "[redacted: aws_access_key]" in text


def test_no_key_a_wrong_key_and_the_rate_limit_are_http_errors(harness: Harness) -> None:
    gateway, _ = start(harness)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": "2025-06-18",
    }
    plain = httpx.post(f"{gateway.url}/mcp", json=body, headers=headers)
    assert plain.status_code == 401
    assert plain.json()["error"]["code"] == "invalid_api_key"
    wrong = httpx.post(
        f"{gateway.url}/mcp", json=body, headers={**headers, "authorization": "Bearer nope"}
    )
    assert wrong.status_code == 401
    limited = {**headers, "authorization": f"Bearer {LIMITED_KEY}"}
    answers = [httpx.post(f"{gateway.url}/mcp", json=body, headers=limited) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert answers[0].headers["x-ratelimit-limit-requests"] == "2"


def test_a_call_has_metrics_and_a_trace_under_its_request_id(harness: Harness) -> None:
    gateway, tools = start(harness)
    headers = {
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": "2025-06-18",
        "authorization": f"Bearer {TENANT_KEY}",
    }
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "notes", "arguments": {"text": "hello"}},
    }
    answer = httpx.post(f"{gateway.url}/mcp", json=body, headers=headers)
    assert answer.status_code == 200
    assert answer.json()["result"]["isError"] is False
    assert json.loads(tools.hits[-1].body) == {"text": "hello"}
    client = harness.client(gateway)
    trace = client.get(f"/v1/toolgate/traces/{answer.headers['x-request-id']}").json()
    assert [c["name"] for c in trace["tool_calls"]] == ["notes"]
    assert trace["route"] == "/mcp"
    metrics = client.get("/metrics").text
    series = 'outcome="ok",source="http",tenant="acme",tool="notes"'
    assert f"toolgate_tool_calls_total{{{series}}} 1.0" in metrics
    other = harness.client(gateway, OTHER_KEY)
    assert other.get(f"/v1/toolgate/traces/{answer.headers['x-request-id']}").status_code == 404


def test_a_priced_tool_is_paid_from_the_tenants_budget_over_mcp(harness: Harness) -> None:
    tools = Recorder(tool_answer)
    url = harness.serve(tools).url
    gateway = harness.gateway(
        {
            "upstreams": [{"name": "up", "base_url": "http://127.0.0.1:9/v1"}],
            "models": [{"name": MODEL, "upstream": "up"}],
            "tools": [{"name": "notes", "http": {"method": "POST", "url": f"{url}/notes"}}],
            "policy": {"tools": [{"tools": ["notes"], "cost_usd": 0.01}]},
            "tenants": [
                {
                    "id": "acme",
                    "keys": [TENANT_KEY],
                    "tools": ["notes"],
                    "budget": {"cost_usd_per_day": 0.015},
                }
            ],
        }
    )

    async def scenario() -> tuple[Any, Any]:
        http, client = await session(gateway.url, TENANT_KEY, "auto")
        async with http, client:
            paid = await client.call_tool("notes", {"text": "one"})
            refused = await client.call_tool("notes", {"text": "two"})
            return paid, refused

    paid, refused = asyncio.run(scenario())
    assert not paid.is_error
    assert refused.is_error
    assert "cost budget" in refused.content[0].text
    assert len(tools.hits) == 1  # the call the budget could not pay for never left
    usage = httpx.get(
        f"{gateway.url}/v1/toolgate/usage", headers={"authorization": f"Bearer {TENANT_KEY}"}
    ).json()["data"][0]
    assert usage["cost_usd"] == 0.01


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_large_catalog_is_listed_page_by_page(harness: Harness, mode: str) -> None:
    """A catalog of thousands is not one tools/list answer: pages of ``TOOLS_PAGE``, each
    naming the next, every tool once and in order; a cursor the server did not give is
    an invalid-params error, not a first page."""
    names = [f"tool_{i:03d}" for i in range(2 * TOOLS_PAGE + 17)]
    url = "http://127.0.0.1:9/"
    config = {
        "upstreams": [{"name": "up", "base_url": "http://127.0.0.1:9/v1"}],
        "models": [{"name": MODEL, "upstream": "up"}],
        "tools": [{"name": name, "http": {"url": url}} for name in names],
        "tenants": [{"id": "acme", "keys": [TENANT_KEY], "tools": ["tool_*"]}],
    }
    gateway = harness.gateway(config)

    async def scenario() -> None:
        http, client = await session(gateway.url, TENANT_KEY, mode)
        async with http, client:
            listed, cursor, pages = [], None, []
            while True:
                page = await client.list_tools(cursor=cursor, cache_mode="bypass")
                pages.append(len(page.tools))
                listed += [tool.name for tool in page.tools]
                cursor = page.next_cursor
                if cursor is None:
                    break
            assert pages == [TOOLS_PAGE, TOOLS_PAGE, 17]
            assert listed == names
            for bad in ("not-a-cursor!", "dG9vbF85OTk=", "x" * 5000):  # the last: tool_999
                with pytest.raises(MCPError) as refused:
                    await client.list_tools(cursor=bad, cache_mode="bypass")
                assert refused.value.code == INVALID_PARAMS

    asyncio.run(scenario())
