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
EVERY_SECRET = (*SECRETS, METRICS_TOKEN)
QUOTED = " ".join(EVERY_SECRET)
COMMANDS = ("echo", "fail", "down", "bound", "quote", "e400", "e429", "e500", "broken", "late")


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
    if command in ("echo", "fail", "down", "bound", "late") and not results:
        message = asks(call(command if command != "late" else "echo", {}))
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
    """``/echo`` answers with everything it received; ``/fail`` quotes it in a 500."""
    received = {"path": hit.raw_path, "headers": hit.headers}
    if hit.raw_path.startswith("/fail"):
        return Answer(500, json.dumps({"error": received}).encode())
    return Answer(body=json.dumps(received).encode())


def _config(upstream_url: str, tools_url: str) -> dict[str, Any]:
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
    return config(upstream_url, [*tools, bound], server={"metrics_token": METRICS_TOKEN})


@pytest.fixture
def canary(tmp_path: Path, harness: Harness) -> Iterator[tuple[ServeProcess, Recorder, Recorder]]:
    upstream, tools = Recorder(_upstream), Recorder(_tools)
    path = tmp_path / "gateway.yaml"
    path.write_text(json.dumps(_config(harness.serve(upstream).url, harness.serve(tools).url)))
    gateway = ServeProcess(path, tmp_path / "stderr.log", "--log-level", "debug")
    try:
        yield gateway, upstream, tools
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


def test_no_secret_leaves_by_any_path(canary: tuple[ServeProcess, Recorder, Recorder]) -> None:
    gateway, upstream, tools = canary
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
    log = gateway.stop()

    # The paths were really driven: the far side got the secrets it is meant to get...
    assert any(h.headers.get("x-api-key") == TOOL_SECRET for h in tools.hits)
    assert any(QUERY_SECRET in h.raw_path for h in tools.hits)
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
    tools_saw = "\n".join(h.text for h in tools.hits)
    for secret in EVERY_SECRET:
        assert secret not in everything, f"{secret} reached a client"
        assert secret not in log, f"{secret} reached the log"
        assert secret not in model_saw, f"{secret} reached the model"
    for secret in (TENANT_KEY, OTHER_KEY, UPSTREAM_KEY, METRICS_TOKEN):
        assert secret not in tools_saw, f"{secret} reached a tool"
    assert BOUND_VALUE not in model_saw
    assert BOUND_VALUE not in everything
    assert BOUND_VALUE not in log
