"""The canary: known secrets configured everywhere, every error path that could carry
one driven against ``toolgate serve`` (a real process, its log on stderr), then every
response, event stream, header, trace, metric, log line and everything the model and
the tools received is searched. A secret may reach only where it is configured to go:
the upstream key to the upstream's ``Authorization``, a tool's secrets to that tool."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.server.mcpserver import Context, MCPServer

from tests.support.mcp_servers import HeaderLog
from tests.support.recorder import Answer, Received, Recorder
from tests.support.scripted import (
    MODEL,
    OTHER_KEY,
    QUERY_SECRET,
    SECRETS,
    TENANT_KEY,
    TOOL_SECRET,
    UPSTREAM_KEY,
    Harness,
    asks,
    call,
    completion,
    config,
    says,
    sse,
    stream_of,
    tool,
)
from tests.support.servers import ServeProcess, free_port

METRICS_TOKEN = "metrics-token-CANARY-0006"
BOUND_VALUE = "BOUND-Value-CANARY-0007"  # a user's header value: not a secret, never shown
MCP_SECRET = "mcp-token-CANARY-0008"  # an MCP server's header
OPENAPI_SECRET = "openapi-key-CANARY-0009"  # an OpenAPI source's security scheme value
ADMIN_KEY = "admin-key-CANARY-0010"
EVERY_SECRET = (*SECRETS, METRICS_TOKEN, MCP_SECRET, OPENAPI_SECRET, ADMIN_KEY)
QUOTED = " ".join(EVERY_SECRET)
COMMANDS = (
    "echo",
    "fail",
    "down",
    "bound",
    "quote",
    "e400",
    "e429",
    "e500",
    "broken",
    "late",
    "mcp",
    "api",
)
# Commands whose tool has another name: an MCP server's and an OpenAPI operation.
CALLS = {"late": "echo", "mcp": "m_headers", "api": "o_echoAll"}
OPENAPI = {
    "openapi": "3.1.0",
    "info": {"title": "canary", "version": "1"},
    "servers": [{"url": "/"}],  # where the document was fetched from
    "components": {"securitySchemes": {"key": {"type": "apiKey", "in": "header", "name": "X-Key"}}},
    "security": [{"key": []}],
    "paths": {"/echo/api": {"get": {"operationId": "echoAll", "responses": {"200": {}}}}},
}


def _error(status: int, extra: list[tuple[str, str]] | None = None) -> Answer:
    body = {"error": {"message": f"your keys: {QUOTED}", "type": "invalid_request_error"}}
    headers = [("content-type", "application/json"), *(extra or [])]
    return Answer(status, json.dumps(body).encode(), headers)


def _upstream(hit: Received) -> Answer:
    """A model that does what the first user message says, and quotes every secret it
    has heard of in each error it gives."""
    body = json.loads(hit.body)
    messages = body["messages"]
    command = messages[0]["content"]
    results = [m["content"] for m in messages if m["role"] == "tool"]
    stream = body.get("stream") is True
    if command == "e400":
        return _error(400)
    if command == "e429":
        return _error(429, [("retry-after", "30")])
    if command == "e500":
        return _error(500)
    if command == "broken" and stream:  # an error event after the first chunk
        chunks = stream_of(says("partial"))[:1]
        error = {"error": {"message": f"stream broke: {QUOTED}", "type": "server_error"}}
        return Answer(headers=[("content-type", "text/event-stream")], chunks=chunks + sse(error))
    if command in ("echo", "fail", "down", "bound", "late", "mcp", "api") and not results:
        message = asks(call(CALLS.get(command, command), {}))
    elif command == "late" and stream:  # the hidden round went well; the answer breaks
        error = {"error": {"message": f"late: {QUOTED}", "type": "server_error"}}
        return Answer(headers=[("content-type", "text/event-stream")], chunks=sse(error))
    elif results:
        message = says("the tool said: " + " / ".join(results))  # the model repeats it all
    else:
        message = says(f"I know {QUOTED}")
    if stream:
        return Answer(headers=[("content-type", "text/event-stream")], chunks=stream_of(message))
    return Answer(body=json.dumps(completion(message)).encode())


def _tools(hit: Received) -> Answer:
    """``/echo`` answers with everything it received; ``/fail`` quotes it in a 500;
    ``/openapi.json`` is the OpenAPI source's document."""
    if hit.raw_path == "/openapi.json":
        return Answer(body=json.dumps(OPENAPI).encode())
    received = {"path": hit.raw_path, "headers": hit.headers}
    if hit.raw_path.startswith("/fail"):
        return Answer(500, json.dumps({"error": received}).encode())
    return Answer(body=json.dumps(received).encode())


def _mcp_server() -> HeaderLog:
    """An MCP server whose one tool answers with every header its request carried."""
    server = MCPServer("canary")

    @server.tool()
    def headers(ctx: Context) -> str:
        """Echoes the request's headers."""
        request = ctx.request_context.request
        return json.dumps(dict(request.headers) if request is not None else {})

    return HeaderLog(server.streamable_http_app())


def _config(upstream_url: str, tools_url: str, mcp_url: str) -> dict[str, Any]:
    tools = [
        tool("echo", f"{tools_url}/echo?key={QUERY_SECRET}"),
        tool("fail", f"{tools_url}/fail?key={QUERY_SECRET}"),
        tool("down", f"http://127.0.0.1:{free_port()}/x?key={QUERY_SECRET}"),
    ]
    for item in tools:
        item["http"]["headers"] = {
            "X-Api-Key": TOOL_SECRET,
            "Authorization": f"Bearer {TOOL_SECRET}",
        }
    bound = tool(
        "bound",
        f"{tools_url}/echo",
        {"user": {"type": "string", "pattern": "^[a-z]+$"}},
        bind={"user": "{header.x-toolgate-user}"},
    )
    return config(
        upstream_url,
        [*tools, bound],
        server={"metrics_token": METRICS_TOKEN, "admin_key": ADMIN_KEY},
        mcp=[
            {
                "name": "canary",
                "url": f"{mcp_url}/mcp",
                "prefix": "m_",
                "headers": {"Authorization": f"Bearer {MCP_SECRET}"},
            }
        ],
        openapi=[
            {"spec": f"{tools_url}/openapi.json", "prefix": "o_", "auth": {"key": OPENAPI_SECRET}}
        ],
    )


@pytest.fixture
def canary(
    tmp_path: Path, harness: Harness
) -> Iterator[tuple[ServeProcess, Recorder, Recorder, HeaderLog]]:
    upstream, tools, mcp = Recorder(_upstream), Recorder(_tools), _mcp_server()
    path = tmp_path / "gateway.yaml"
    urls = (harness.serve(upstream).url, harness.serve(tools).url, harness.serve(mcp).url)
    path.write_text(json.dumps(_config(*urls)))
    gateway = ServeProcess(path, tmp_path / "stderr.log", "--log-level", "debug")
    try:
        yield gateway, upstream, tools, mcp
    finally:
        gateway.stop()


def _exchange(client: httpx.Client, command: str, stream: bool) -> tuple[str, str | None]:
    """One request; everything that came back as one text, and its request id."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": command}], "stream": stream}
    response = client.post("/v1/chat/completions", json=body)
    head = "\n".join(f"{k}: {v}" for k, v in response.headers.items())
    return f"{response.status_code}\n{head}\n\n{response.text}", response.headers.get(
        "x-request-id"
    )


def test_no_secret_leaves_by_any_path(
    canary: tuple[ServeProcess, Recorder, Recorder, HeaderLog],
) -> None:
    gateway, upstream, tools, mcp = canary
    seen: list[str] = []
    statuses: dict[tuple[str, str, bool], int] = {}
    for key in (TENANT_KEY, OTHER_KEY):  # acme has the tools; beta's requests pass through
        headers = {"authorization": f"Bearer {key}", "x-toolgate-user": BOUND_VALUE}
        with httpx.Client(base_url=gateway.url, headers=headers, timeout=20) as client:
            for command in COMMANDS:
                for stream in (False, True):
                    text, request_id = _exchange(client, command, stream)
                    seen.append(text)
                    statuses[(key[:12], command, stream)] = int(text.split("\n", 1)[0])
                    trace = client.get(f"/v1/toolgate/traces/{request_id}")
                    seen.append(trace.text)
            seen.append(client.post("/v1/embeddings", json={"model": MODEL}).text)
    metrics = httpx.get(
        f"{gateway.url}/metrics", headers={"authorization": f"Bearer {METRICS_TOKEN}"}
    )
    assert metrics.status_code == 200
    seen.append(metrics.text)
    reloaded = httpx.post(
        f"{gateway.url}/admin/reload", headers={"authorization": f"Bearer {ADMIN_KEY}"}
    )
    assert reloaded.status_code == 200
    seen.append(reloaded.text)
    mcp_key = {"authorization": f"Bearer {TENANT_KEY}", "accept": "application/json"}
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    mcp_headers = {**mcp_key, "mcp-protocol-version": "2025-06-18"}
    seen.append(httpx.post(f"{gateway.url}/mcp", json=listing, headers=mcp_headers).text)
    log = gateway.stop()

    # The paths were really driven: the far side got the secrets it is meant to get...
    assert any(h.headers.get("x-api-key") == TOOL_SECRET for h in tools.hits)
    assert any(QUERY_SECRET in h.raw_path for h in tools.hits)
    assert any(h.headers.get("x-key") == OPENAPI_SECRET for h in tools.hits)
    assert "m_headers" in everything_sent_to(upstream)
    assert any(h.get("authorization") == f"Bearer {MCP_SECRET}" for h in mcp.seen)
    assert all(h.headers["authorization"] == f"Bearer {UPSTREAM_KEY}" for h in upstream.hits)
    # ...and errors kept their meaning while losing the secrets.
    assert statuses[(TENANT_KEY[:12], "e400", False)] == 400
    assert statuses[(TENANT_KEY[:12], "e429", False)] == 429
    assert statuses[(OTHER_KEY[:12], "e429", True)] == 429
    assert statuses[(TENANT_KEY[:12], "e500", False)] == 502
    everything = "\n".join(seen)
    assert "[redacted]" in everything
    assert "retry-after: 30" in everything
    assert "ConnectError" in log  # the unreachable tool was logged

    model_saw = "\n".join(h.body.decode() for h in upstream.hits)
    assert "mcp-protocol-version" in model_saw  # the MCP server's echo of its headers
    assert "/echo/api" in model_saw  # the OpenAPI operation's echo
    tools_saw = "\n".join(h.text for h in tools.hits)
    for secret in EVERY_SECRET:
        assert secret not in everything, f"{secret} reached a client"
        assert secret not in log, f"{secret} reached the log"
        assert secret not in model_saw, f"{secret} reached the model"
    for secret in (TENANT_KEY, OTHER_KEY, UPSTREAM_KEY, METRICS_TOKEN, ADMIN_KEY, MCP_SECRET):
        assert secret not in tools_saw, f"{secret} reached a tool"
    assert BOUND_VALUE not in model_saw
    assert BOUND_VALUE not in everything
    assert BOUND_VALUE not in log


def everything_sent_to(server: Recorder) -> str:
    return "\n".join(hit.text for hit in server.hits)
