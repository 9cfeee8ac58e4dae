"""Recordings for replay (issue 26): a tenant whose requests are recorded gets, in each
request's trace, what a replay needs — the request as sent, the tools as the model saw
them, every round's answer, every tool call's arguments and result, how it ended —
redacted like everything else and kept for ``recordings.ttl_s``; which requests are
recorded follows ``record``. Driven by the real ``openai`` SDK under uvicorn."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
import redis

from gateway import GatewayConfig
from gateway.errors import ConfigError
from gateway.runtime.loader import check_references
from tests.support.recorder import Answer, Received, Recorder
from tests.support.scripted import (
    MODEL,
    SECRETS,
    TENANT_KEY,
    TOOL_SECRET,
    UPSTREAM_KEY,
    Harness,
    Model,
    asks,
    call,
    config,
    says,
    tool,
)
from tests.support.servers import ServerThread, until, wait_for

USER = "user-CANARY-bound-0026"


def tool_answer(hit: Received) -> Answer:
    """The tools answer with what they got; one echoes the secret header it was sent."""
    if hit.raw_path.startswith("/fail"):
        return Answer(500, b'{"error": "down"}')
    body = {"path": hit.raw_path, "echo": hit.headers.get("x-tool-secret", "")}
    return Answer(body=json.dumps(body).encode())


def start(harness: Harness, model: Model, record: Any, **recordings: Any) -> ServerThread:
    tools = harness.serve(Recorder(tool_answer)).url
    data = config(
        harness.serve(model.recorder).url,
        [
            tool(
                "lookup",
                f"{tools}/lookup/{{id}}",
                {"id": {"type": "string"}},
                bind={"user": "{header.x-user}"},
                http={
                    "url": f"{tools}/lookup/{{id}}",
                    "headers": {"x-tool-secret": TOOL_SECRET, "x-user": "{user}"},
                },
            ),
            tool("fail", f"{tools}/fail"),
        ],
        recordings=recordings,
    )
    data["tenants"][0]["record"] = record
    return harness.gateway(data)


def sdk(harness: Harness, gateway: ServerThread) -> openai.OpenAI:
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=TENANT_KEY, max_retries=0)
    harness.on_close(client.close)
    return client


def ask(harness: Harness, gateway: ServerThread, text: str = "find c1") -> str:
    raw = sdk(harness, gateway).chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": text}],
        extra_headers={"x-user": USER},
    )
    return str(raw.headers["x-request-id"])


def trace(harness: Harness, gateway: ServerThread, request_id: str) -> dict[str, Any]:
    found = harness.client(gateway).get(f"/v1/toolgate/traces/{request_id}")
    assert found.status_code == 200, found.text
    return dict(found.json())


def two_rounds() -> Model:
    return Model(
        asks(call("lookup", {"id": "c1"}, "call_a")),
        asks(call("lookup", {"id": "c2"}, "call_b"), call("fail", {}, "call_c")),
        says("Found them."),
    )


def test_a_recording_holds_what_a_replay_needs_and_no_secret(harness: Harness) -> None:
    gateway = start(harness, two_rounds(), "all")
    request_id = ask(harness, gateway, f"find c1; my key is {UPSTREAM_KEY}")

    kept = trace(harness, gateway, request_id)["recording"]
    assert kept["kept"] is True
    assert kept["version"] == 1
    assert kept["route"] == "/v1/chat/completions"
    assert kept["model"] == MODEL
    assert kept["request"]["messages"][0]["role"] == "user"
    assert kept["request"]["model"] == MODEL
    tools = {t["name"]: t for t in kept["tools"]}
    assert set(tools) == {"lookup", "fail"}
    assert tools["lookup"]["definition"]["function"]["name"] == "lookup"
    assert "user" not in tools["lookup"]["definition"]["function"]["parameters"]["properties"]
    assert tools["lookup"]["fingerprint"].startswith("sha256:")
    assert tools["lookup"]["effects"] == "read"  # a GET
    rounds = kept["rounds"]
    assert [r["round"] for r in rounds] == [1, 2, 3]
    assert [c["name"] for c in rounds[1]["calls"]] == ["lookup", "fail"]
    assert json.loads(rounds[0]["calls"][0]["arguments"]) == {"id": "c1"}
    assert rounds[2]["content"] == "Found them."
    calls = {c["id"]: c for c in kept["tool_calls"]}
    assert calls["call_a"]["arguments"] == {"id": "c1", "user": "[redacted]"}
    assert calls["call_a"]["outcome"] == "ok"
    assert json.loads(calls["call_a"]["result"])["path"] == "/lookup/c1"
    assert calls["call_c"]["outcome"] == "http_error"
    assert kept["ended"] == {
        "kind": "final",
        "content": "Found them.",
        "refusal": None,
        "finish_reason": "stop",
    }
    assert kept["status"] == 200
    text = json.dumps(kept)
    for secret in (*SECRETS, USER):
        assert secret not in text
    assert "[redacted]" in text


def test_which_requests_are_recorded_follows_record(harness: Harness) -> None:
    fine = Model(asks(call("lookup", {"id": "c1"}, "call_a")), says("ok"))
    failing = Model(asks(call("fail", {}, "call_f")), says("sorry"))
    for record, model, expected in (
        ("off", fine, False),
        ("errors", fine, False),
        ("errors", failing, True),  # a tool call failed
        (0.0, fine, False),
        (1.0, fine, True),
    ):
        gateway = start(harness, model, record)
        found = trace(harness, gateway, ask(harness, gateway))
        assert ("recording" in found) is expected, (record, found.get("recording"))


def test_a_recording_past_its_size_bound_is_not_kept(harness: Harness) -> None:
    gateway = start(harness, two_rounds(), "all", max_bytes=200)
    kept = trace(harness, gateway, ask(harness, gateway))["recording"]
    assert kept["kept"] is False
    assert kept["bytes"] > kept["max_bytes"] == 200
    assert "request" not in kept


def test_a_recorded_trace_lives_for_recordings_ttl(
    harness: Harness, redis_url: str, redis_prefix: str
) -> None:
    harness.store = {"url": redis_url, "prefix": f"{redis_prefix}rec:", "timeout_s": 2.0}
    gateway = start(harness, two_rounds(), "all", ttl_s=86400)
    request_id = ask(harness, gateway)
    client = redis.Redis.from_url(redis_url)
    try:
        # Read straight from the store, as another replica would: the trace is kept
        # just after the answer is sent (``ops/afterwards.py``).
        pattern = f"{redis_prefix}rec:t:acme:trace:{request_id}"
        assert wait_for(lambda: client.keys(pattern))
        (key,) = client.keys(pattern)
        assert client.pttl(key) > 3600 * 1000  # longer than traces.ttl_s
    finally:
        client.close()


def test_recordings_need_traces(harness: Harness) -> None:
    data = config("http://127.0.0.1:9", [], traces={"enabled": False})
    data["tenants"][0]["record"] = "all"
    problems = check_references(GatewayConfig.model_validate(data))
    assert "recordings are kept with traces: traces.enabled must be true" in problems
    with pytest.raises(ConfigError):
        harness.gateway(data)


def test_a_recording_holds_the_request_as_the_client_sent_it(harness: Harness) -> None:
    """Issue 34 §5: the chat surface wrote the restored hidden turn into the body a
    recording read (the client sent 3 messages, the recording held 4, with a tool
    output the client never sent); the Responses surface rewrote its ``tools``. The
    recording is compared with the bytes that went out."""
    client_tool = {
        "type": "function",
        "function": {"name": "ask_user", "parameters": {"type": "object", "properties": {}}},
    }
    model = Model(
        asks(call("lookup", {"id": "c1"}, "call_s"), call("ask_user", {}, "call_u")),
        says("Thanks."),
    )
    gateway = start(harness, model, "all")
    http = harness.client(gateway)
    first = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "find c1, then ask me"}],
        "tools": [client_tool],
    }
    answer = http.post("/v1/chat/completions", json=first, headers={"x-user": USER}).json()
    handed = answer["choices"][0]["message"]
    assert [c["id"] for c in handed["tool_calls"]] == ["call_u"]
    second = {
        **first,
        "messages": [
            *first["messages"],
            handed,
            {"role": "tool", "tool_call_id": "call_u", "content": "yes"},
        ],
    }
    sent = json.dumps(second).encode()
    raw = http.post(
        "/v1/chat/completions",
        content=sent,
        headers={"x-user": USER, "content-type": "application/json"},
    )
    assert raw.status_code == 200, raw.text
    recorded = trace(harness, gateway, raw.headers["x-request-id"])["recording"]
    assert recorded["request"] == json.loads(sent)  # 3 messages, as sent
    # ... while the loop itself started from the restored history (the hidden round).
    assert len(recorded["loop"]["params"]["messages"]) > len(second["messages"])

    hosted = {
        "model": MODEL,
        "input": "find c1",
        "tools": [{"type": "web_search"}, {"type": "function", "name": "f", "parameters": {}}],
    }
    raw = http.post("/v1/responses", json=hosted, headers={"x-user": USER})
    assert raw.status_code == 200, raw.text
    recorded = trace(harness, gateway, raw.headers["x-request-id"])["recording"]
    assert recorded["request"] == hosted  # the hosted tool the gateway dropped is there


def test_a_streamed_request_is_recorded_as_the_client_sent_it(harness: Harness) -> None:
    """The same, streamed, on both surfaces: the recording's request is the client's
    body, whatever the loop started from."""
    model = Model(asks(call("lookup", {"id": "c1"}, "call_s")), says("Found."))
    gateway = start(harness, model, "all")
    http = harness.client(gateway)
    bodies = {
        "/v1/chat/completions": {
            "model": MODEL,
            "messages": [{"role": "user", "content": "find c1"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        "/v1/responses": {
            "model": MODEL,
            "input": "find c1",
            "stream": True,
            "tools": [{"type": "web_search"}],
        },
    }
    for path, body in bodies.items():
        sent = json.dumps(body, indent=1).encode()  # the bytes, not a re-encoding of them
        headers = {"x-user": USER, "content-type": "application/json"}
        with http.stream("POST", path, content=sent, headers=headers) as response:
            assert response.status_code == 200
            request_id = response.headers["x-request-id"]
            assert "Found." in "".join(response.iter_text())
        recorded = wait_for_trace(harness, gateway, request_id)["recording"]
        assert recorded["request"] == json.loads(sent), path
        assert recorded["ended"]["kind"] == "final"


def wait_for_trace(harness: Harness, gateway: ServerThread, request_id: str) -> dict[str, Any]:
    """A stream's trace is kept once the stream is over, just after its last byte."""
    http = harness.client(gateway)
    found = until(
        lambda: http.get(f"/v1/toolgate/traces/{request_id}"), lambda a: a.status_code == 200
    )
    assert found is not None, f"no trace of {request_id}"
    return dict(found.json())
