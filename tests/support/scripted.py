"""A running gateway under attack or fault: real uvicorn servers on loopback, recording
servers for the tools and a scripted upstream model, and a canary on a second loopback
address (127.0.0.2) that stands for "another origin": anything reaching it escaped."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from typing import Any

import httpx
from starlette.types import ASGIApp

from gateway import GatewayConfig, create_app
from tests.support.recorder import Answer, Received, Recorder
from tests.support.servers import WAIT_S, ServerThread

TENANT_KEY = "sk-tenant-acme-CANARY-0001"
OTHER_KEY = "sk-tenant-beta-CANARY-0002"
UPSTREAM_KEY = "sk-upstream-CANARY-0003"
TOOL_SECRET = "tool-secret-CANARY-0004"
QUERY_SECRET = "query-secret-CANARY-0005"
SECRETS = (TENANT_KEY, OTHER_KEY, UPSTREAM_KEY, TOOL_SECRET, QUERY_SECRET)
MODEL = "gpt-test"


def completion(message: dict[str, Any], usage: bool = True) -> dict[str, Any]:
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    body: dict[str, Any] = {
        "id": "chatcmpl-x",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
    }
    if usage:
        body["usage"] = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    return body


def sse(*events: Any) -> list[bytes]:
    return [
        b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n"
        for e in events
    ] + [b"data: [DONE]\n\n"]


def stream_of(message: dict[str, Any]) -> list[bytes]:
    """A message as chat.completion.chunk events (tool calls whole in one delta)."""
    base = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": MODEL}
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    calls = message.get("tool_calls")
    if calls:
        delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(calls)]
    finish = "tool_calls" if calls else "stop"
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    return sse(
        {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
        {**base, "choices": [], "usage": usage},
    )


def call(name: str, arguments: dict[str, Any] | str, call_id: str = "call_1") -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def asks(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": list(calls)}


def says(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


Script = Callable[[dict[str, Any]], dict[str, Any]]


def tool_then_answer(name: str) -> Script:
    """A model that calls ``name`` with the JSON object the user wrote, then answers."""

    def script(body: dict[str, Any]) -> dict[str, Any]:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return says("done")
        return asks(call(name, last["content"]))

    return script


class Model:
    """A scripted upstream model: answers each chat request with the next message of
    ``script`` (the last one repeats) or what a function of the body says, streamed
    when asked; records what it was fed."""

    def __init__(self, *script: dict[str, Any] | Script) -> None:
        self.script = list(script) or [says("done")]
        self.recorder = Recorder(self._respond)
        self._count = 0
        self._lock = threading.Lock()

    def _respond(self, hit: Received) -> Answer:
        if not hit.raw_path.endswith("/chat/completions"):
            return Answer(404, b'{"error":{"message":"no such route"}}')
        body = json.loads(hit.body)
        with self._lock:
            step = self.script[min(self._count, len(self.script) - 1)]
            self._count += 1
        message = step(body) if callable(step) else step
        if body.get("stream"):
            return Answer(
                headers=[("content-type", "text/event-stream")], chunks=stream_of(message)
            )
        return Answer(body=json.dumps(completion(message)).encode())

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The chat requests it received (not a start-up probe's ``GET /models``)."""
        return [json.loads(h.body) for h in self.recorder.hits if h.method == "POST"]

    def tool_results(self, index: int = -1) -> list[str]:
        """The tool messages of the ``index``-th request the model received."""
        messages = self.requests[index]["messages"]
        return [m["content"] for m in messages if m["role"] == "tool"]


def tool(
    name: str, url: str, properties: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties or {}}
    return {"name": name, "description": name, "parameters": schema, "http": {"url": url}} | extra


def config(upstream_url: str, tools: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "upstreams": [
            {
                "name": "up",
                "base_url": f"{upstream_url}/v1",
                "api_key": UPSTREAM_KEY,
                "max_retries": 1,
            }
        ],
        "models": [{"name": MODEL, "upstream": "up"}],
        "tools": tools,
        "tenants": [
            {"id": "acme", "keys": [TENANT_KEY], "tools": ["*"] if tools else []},
            {"id": "beta", "keys": [OTHER_KEY], "tools": []},
        ],
    }
    for key, value in extra.items():
        data[key] = value | data[key] if isinstance(value, dict) and key in data else value
    return data


class Harness:
    """Starts servers for one test and stops them all at its end, concurrently."""

    def __init__(self) -> None:
        self._servers: list[ServerThread] = []
        self._clients: list[httpx.Client] = []
        self._closers: list[Callable[[], object]] = []
        self.store: dict[str, Any] | None = None  # in place of every gateway's ``store:``

    def on_close(self, close: Callable[[], object]) -> None:
        """Run ``close`` (an SDK client's, say) when the test ends, before the servers stop."""
        self._closers.append(close)

    def serve(self, app: ASGIApp, host: str = "127.0.0.1", port: int = 0) -> ServerThread:
        server = ServerThread(app, host, port).start()
        self._servers.append(server)
        return server

    def gateway(
        self, data: dict[str, Any], port: int = 0, environ: dict[str, str] | None = None
    ) -> ServerThread:
        if self.store is not None:
            data = {**data, "store": self.store}
        app = create_app(GatewayConfig.model_validate(data), environ=os.environ | (environ or {}))
        return self.serve(app, port=port)

    def client(self, gateway: ServerThread, key: str = TENANT_KEY, **options: Any) -> httpx.Client:
        options.setdefault("timeout", WAIT_S)
        headers = {"authorization": f"Bearer {key}", **options.pop("headers", {})}
        client = httpx.Client(base_url=gateway.url, headers=headers, **options)
        self._clients.append(client)
        return client

    def close(self) -> None:
        for close in self._closers:
            close()
        for client in self._clients:
            client.close()
        stoppers = [threading.Thread(target=s.stop) for s in self._servers]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join()


def chat(text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], **extra}


def assert_envelope(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str)
    return dict(error)


RespondFactory = Callable[[Received], Answer]
