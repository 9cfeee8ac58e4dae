"""Long agent sessions: an agent resends its whole session every turn, so the default
body limit is OpenAI's own or more; a large body is decoded and translated off the
event loop, and the large bodies one process holds at once are bounded — past the
bound a 503 the client retries, the share given back when each answer is done
(docs/design.md §11)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from gateway.config import ServerConfig
from tests.support.anthropic_upstream import message as anthropic_message
from tests.support.anthropic_upstream import stream_of as anthropic_stream
from tests.support.anthropic_upstream import tool_use as anthropic_tool_use
from tests.support.bedrock_upstream import answer_of as bedrock_answer
from tests.support.bedrock_upstream import stream_of as bedrock_stream
from tests.support.bedrock_upstream import tool_use as bedrock_tool_use
from tests.support.hostile import LoopWatch
from tests.support.recorder import Answer, Received, Recorder
from tests.support.schema import assert_valid_response
from tests.support.scripted import (
    MODEL,
    TENANT_KEY,
    Harness,
    Model,
    asks,
    call,
    completion,
    config,
    says,
)
from tests.support.scripted import stream_of as chat_stream_of


def session(turns: int, output: str) -> list[dict[str, Any]]:
    """A Codex-like session replayed in full: calls of its shell tool and their output."""
    items: list[dict[str, Any]] = [{"role": "user", "content": "fix the failing test"}]
    for turn in range(turns):
        call_id = f"call_{turn}"
        items += [
            {
                "type": "function_call",
                "call_id": call_id,
                "name": "exec_command",
                "arguments": f'{{"cmd": ["cat", "file{turn}.py"]}}',
            },
            {"type": "function_call_output", "call_id": call_id, "output": output},
        ]
    return [*items, {"role": "user", "content": "and now?"}]


SHELL: Any = {"type": "function", "name": "exec_command", "parameters": {"type": "object"}}


def test_the_default_limit_is_at_least_openais() -> None:
    assert ServerConfig().max_body_bytes >= 25 * 1024 * 1024  # OpenAI's 413 names 26,214,400


def test_a_long_agent_session_past_the_old_limit_is_answered(harness: Harness) -> None:
    model = Model(says("all green"))
    gateway = harness.gateway(config(harness.serve(model.recorder).url, []))
    items = session(2_000, "x = 1\n" * 400)  # about 5 MiB, five times the old 1 MiB
    # Not the SDK: it spends seconds building such a request, the gateway 0.2 s.
    client = harness.client(gateway, timeout=60)
    body = {"model": MODEL, "input": items, "tools": [SHELL], "store": False}
    response = client.post("/v1/responses", json=body)
    assert response.status_code == 200, response.text
    assert_valid_response(response.json())
    assert response.json()["output"][0]["content"][0]["text"] == "all green"
    [sent] = model.requests
    assert len(sent["messages"]) == 1 + 2 * 2_000 + 1
    assert sent["messages"][-2] == {
        "role": "tool",
        "tool_call_id": "call_1999",
        "content": "x = 1\n" * 400,
    }


def test_a_large_body_of_tiny_items_leaves_the_event_loop_free_while_it_is_translated(
    harness: Harness,
) -> None:
    """60,000 tiny items: decoding them holds the interpreter (one C call), but
    translating and digesting them, which took most of the time on the loop, no
    longer stalls it."""
    model = Model(says("ok"))
    gateway = harness.gateway(config(harness.serve(model.recorder).url, []))
    body = {"model": MODEL, "input": session(30_000, "ok"), "tools": [SHELL], "store": False}
    client = harness.client(gateway, timeout=60)
    with LoopWatch(gateway) as watch:
        started = time.perf_counter()
        response = client.post("/v1/responses", json=body)
        took = time.perf_counter() - started
    assert response.status_code == 200, response.text
    assert len(model.requests[0]["messages"]) == 60_002
    # On the loop, the longest stall was most of the request; now it is the decoding.
    assert watch.longest < took / 2, (watch.longest, took)


def held_metric(client: httpx.Client) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("toolgate_large_body_bytes_held "):
            return float(line.split()[1])
    raise AssertionError("no toolgate_large_body_bytes_held in /metrics")


@pytest.mark.parametrize("stream", [False, True])
def test_large_bodies_past_the_held_bound_are_a_503_and_the_share_comes_back(
    harness: Harness, stream: bool
) -> None:
    release = threading.Event()

    def slow(body: dict[str, Any]) -> dict[str, Any]:
        release.wait(10)
        return says("done")

    model = Model(slow)
    limits = {"max_body_bytes": 64_000, "large_body_bytes": 1_000}
    server = limits | {"large_bodies_held_bytes": 100_000}
    gateway = harness.gateway(config(harness.serve(model.recorder).url, [], server=server))
    body = {"model": MODEL, "input": "x" * 60_000, "stream": stream}
    client = harness.client(gateway, timeout=20)
    first: list[httpx.Response] = []
    holder = threading.Thread(
        target=lambda: first.append(client.post("/v1/responses", json=body)), daemon=True
    )
    holder.start()
    deadline = time.monotonic() + 10
    while not model.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    assert held_metric(client) > 60_000

    openai_client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=TENANT_KEY, max_retries=0)
    harness.on_close(openai_client.close)
    with pytest.raises(openai.InternalServerError) as refused:
        openai_client.responses.create(model=MODEL, input="y" * 60_000)
    assert refused.value.status_code == 503
    assert refused.value.response.headers["retry-after"] == "1"
    assert refused.value.body["code"] == "server_overloaded"  # type: ignore[index]
    # A small body is not held: read and parsed (here, to a 400 of its own).
    small = client.post("/v1/responses", json={"model": MODEL, "input": "hi", "background": True})
    assert small.status_code == 400, small.text
    release.set()

    holder.join(15)
    assert first[0].status_code == 200
    assert held_metric(client) == 0.0
    again = openai_client.responses.create(model=MODEL, input="y" * 60_000)
    assert again.output_text == "done"


def test_a_held_bound_below_the_body_limit_is_refused_at_load() -> None:
    with pytest.raises(ValueError, match="large_bodies_held_bytes"):
        ServerConfig(max_body_bytes=2_000, large_bodies_held_bytes=1_000)


def served_once(whole: bytes, chunks: list[bytes]) -> Callable[[Received], Answer]:
    """A model server answering with bytes encoded before the watch starts (encoding
    them in this process would hold the interpreter, and count as the gateway's)."""

    def answer(hit: Received) -> Answer:
        if hit.raw_path.endswith("/converse-stream"):  # Bedrock's: framed events
            kind = "application/vnd.amazon.eventstream"
            return Answer(headers=[("content-type", kind)], chunks=chunks)
        if json.loads(hit.body).get("stream"):
            return Answer(headers=[("content-type", "text/event-stream")], chunks=chunks)
        return Answer(body=whole)

    return answer


HUGE_INPUT = {"data": "x" * 30_000_000}  # a model's 30 MB tool input


@pytest.mark.parametrize("dialect", ["anthropic", "openai", "bedrock"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_huge_tool_input_from_the_model_leaves_the_loop_free(
    harness: Harness, dialect: str, stream: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 62 §5: a model's 30 MB tool input, whole or streamed, on every dialect, is
    parsed and translated off the event loop; what stays on it (the interpreter's
    single calls: parsing a 30 MB document, writing the answer) is a fraction of a
    second (it held /healthz for seconds)."""
    if dialect == "anthropic":
        answer = anthropic_message([anthropic_tool_use("client_tool", HUGE_INPUT)])
        whole, chunks = json.dumps(answer).encode(), anthropic_stream(answer)
    elif dialect == "bedrock":
        converse = bedrock_answer([bedrock_tool_use("client_tool", HUGE_INPUT)])
        whole, chunks = json.dumps(converse).encode(), bedrock_stream(converse)
        for name, value in (("AWS_ACCESS_KEY_ID", "AKIDTEST"), ("AWS_SECRET_ACCESS_KEY", "s")):
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    else:
        message = asks(call("client_tool", HUGE_INPUT))
        whole = json.dumps(completion(message)).encode()
        chunks = chat_stream_of(message)
    upstream = harness.serve(Recorder(served_once(whole, chunks)))
    data = config(upstream.url, [])
    if dialect == "anthropic":
        data["upstreams"][0].update(base_url=upstream.url, dialect="anthropic")
    if dialect == "bedrock":
        data["upstreams"][0] = {
            "name": "bedrock",
            "dialect": "bedrock",
            "base_url": upstream.url,
            "region": "us-east-1",
        }
        data["models"][0] = {"name": MODEL, "upstream": "bedrock", "upstream_model": "m.v1"}
    gateway = harness.gateway(data)
    client = harness.client(gateway, timeout=120)
    tools = [{"type": "function", "function": {"name": "client_tool", "parameters": {}}}]
    body: Any = {"model": MODEL, "messages": [{"role": "user", "content": "go"}]}
    body |= {"stream": stream, "tools": tools}
    with LoopWatch(gateway) as watch:
        response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text[:300]
    assert len(response.content) > 30_000_000
    assert watch.longest < 1.0, watch.longest
