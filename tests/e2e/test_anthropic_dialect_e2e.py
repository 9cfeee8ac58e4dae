"""A model server that speaks Anthropic Messages (``dialect: anthropic``, docs/anthropic.md)
behind the gateway, driven by the stock ``openai`` SDK: server tool rounds, streamed
and not; a failed call's result flagged; thinking blocks carried back with their
signatures and never shown; the client's own tools handed back and the turn restored;
usage with the cache's tokens summed; Responses on the same model; errors mapped.
Every request the scripted server gets is validated against the ``anthropic`` SDK's own
request types (``tests/support/anthropic_upstream.py``)."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.support.anthropic_upstream import (
    USAGE,
    Messages,
    error_body,
    event,
    message,
    text,
    thinking,
    tool_use,
)
from tests.support.recorder import Answer, Received, Recorder
from tests.support.scripted import MODEL, TENANT_KEY, UPSTREAM_KEY, Harness, config, tool
from tests.support.servers import WAIT_S, ServerThread

WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "local_weather",
        "description": "The weather where the user is.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def _tools(hit: Received) -> Answer:
    if hit.raw_path.startswith("/broken"):
        return Answer(500, b'{"error": "down"}')
    return Answer(body=json.dumps({"length": 7}).encode())


def start(
    harness: Harness, model: Messages, **extra: Any
) -> tuple[openai.OpenAI, Recorder, ServerThread]:
    upstream = harness.serve(model.recorder)
    tools = Recorder(_tools)
    tools_url = harness.serve(tools).url
    data = config(
        upstream.url,
        [
            tool(
                "string_length",
                f"{tools_url}/len",
                {"s": {"type": "string"}},
                http={"url": f"{tools_url}/len", "query": {"s": "{s}"}},
                result={"pick": "length"},
            ),
            tool("broken_tool", f"{tools_url}/broken", {}),
        ],
        **extra,
    )
    data["upstreams"][0].update(base_url=upstream.url, dialect="anthropic")
    data["models"][0]["upstream_model"] = "claude-test"
    gateway = harness.gateway(data)
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=TENANT_KEY, timeout=WAIT_S)
    harness.on_close(client.close)
    return client, tools, gateway


def length_then_answer(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Calls string_length until a result comes back, then says what it read."""
    last = body["messages"][-1]
    results = [b for b in last["content"] if b.get("type") == "tool_result"]
    if results:
        return [text(f"the length is {results[0]['content']}")]
    return [thinking("I should measure it."), tool_use("string_length", {"s": "example"})]


@pytest.mark.parametrize("stream", [False, True])
def test_a_server_tool_round_on_a_messages_model(harness: Harness, stream: bool) -> None:
    model = Messages(length_then_answer, key=UPSTREAM_KEY)
    client, tools, _ = start(harness, model)
    asked: Any = {"model": MODEL, "messages": [{"role": "user", "content": "measure example"}]}
    if stream:
        chunks = list(
            client.chat.completions.create(
                **asked, stream=True, stream_options={"include_usage": True}
            )
        )
        answer = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        usage = chunks[-1].usage
        finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
    else:
        completion = client.chat.completions.create(**asked)
        answer = completion.choices[0].message.content or ""
        usage, finish = completion.usage, completion.choices[0].finish_reason
    assert answer == "the length is 7"
    assert finish == "stop"
    assert model.refused == []
    assert len(tools.hits) == 1
    assert tools.hits[0].raw_path == "/len?s=example"
    assert model.versions == {"2026-10-21"}  # what the SDK's types describe
    assert all(h.headers["x-api-key"] == UPSTREAM_KEY for h in model.recorder.hits)
    assert not any("authorization" in h.headers for h in model.recorder.hits)

    first, second = model.requests
    assert first["model"] == "claude-test"
    assert first["max_tokens"] == 4096
    assert [t["name"] for t in first["tools"]] == ["string_length", "broken_tool"]
    assert first["tools"][0]["input_schema"]["properties"] == {"s": {"type": "string"}}
    assert first["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "measure example"}]}
    ]
    # The thinking block goes back unchanged, signature and all, before the call.
    assert second["messages"][1] == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "I should measure it.", "signature": "sig-1"},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "string_length",
                "input": {"s": "example"},
            },
        ],
    }
    assert second["messages"][2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "7"}],
    }
    # Both rounds' usage, the cache's reads and writes among the input tokens.
    prompt = (
        USAGE["input_tokens"]
        + USAGE["cache_creation_input_tokens"]
        + USAGE["cache_read_input_tokens"]
    )
    assert usage is not None
    assert usage.prompt_tokens == 2 * prompt
    assert usage.completion_tokens == 2 * USAGE["output_tokens"]
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == 2 * USAGE["cache_read_input_tokens"]
    # OpenAI's shape: the cache's writes stay in metrics and traces (issue 62 §8)
    assert "cache_write_tokens" not in usage.prompt_tokens_details.model_dump(exclude_unset=True)
    assert usage.prompt_tokens_details.model_extra in (None, {})


def test_a_failed_call_goes_back_flagged_as_an_error(harness: Harness) -> None:
    def broken_then_answer(body: dict[str, Any]) -> list[dict[str, Any]]:
        if len(body["messages"]) > 1:
            return [text("it failed")]
        return [tool_use("broken_tool", {})]

    model = Messages(broken_then_answer)
    client, _, _ = start(harness, model)
    done = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "try it"}]
    )
    assert done.choices[0].message.content == "it failed"
    [result] = model.requests[1]["messages"][-1]["content"]
    assert result["type"] == "tool_result"
    assert result["is_error"] is True
    assert model.refused == []


@pytest.mark.parametrize("stream", [False, True])
def test_the_clients_own_tool_is_handed_back_and_its_turn_restored(
    harness: Harness, stream: bool
) -> None:
    def mixed(body: dict[str, Any]) -> list[dict[str, Any]]:
        last = body["messages"][-1]["content"]
        if any(b.get("tool_use_id") == "toolu_w" for b in last if isinstance(b, dict)):
            return [text("sunny, and 7 letters")]
        return [
            thinking("Both at once."),
            tool_use("string_length", {"s": "example"}, "toolu_s"),
            tool_use("local_weather", {"city": "Oslo"}, "toolu_w"),
        ]

    model = Messages(mixed)
    client, tools, _ = start(harness, model)
    history: list[Any] = [{"role": "user", "content": "weather and length"}]
    if stream:
        chunks = list(
            client.chat.completions.create(
                model=MODEL, messages=history, tools=[WEATHER], stream=True
            )
        )
        calls = [c for ch in chunks if ch.choices for c in ch.choices[0].delta.tool_calls or []]
        handed = [
            (c.id, c.function.name, json.loads(c.function.arguments or ""))
            for c in calls
            if c.function
        ]
    else:
        first = client.chat.completions.create(model=MODEL, messages=history, tools=[WEATHER])
        message = first.choices[0].message
        assert message.content is None  # the thinking is never shown
        handed = [
            (c.id, c.function.name, json.loads(c.function.arguments))
            for c in message.tool_calls or []
            if c.type == "function"
        ]
    assert handed == [("toolu_w", "local_weather", {"city": "Oslo"})]
    assert len(tools.hits) == 1

    history.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "toolu_w",
                    "type": "function",
                    "function": {"name": "local_weather", "arguments": '{"city":"Oslo"}'},
                }
            ],
        }
    )
    history.append({"role": "tool", "tool_call_id": "toolu_w", "content": "sunny"})
    done = client.chat.completions.create(model=MODEL, messages=history, tools=[WEATHER])
    assert done.choices[0].message.content == "sunny, and 7 letters"
    assert model.refused == []
    # The whole turn is put back: thinking, both calls, both results in one user turn.
    last = model.requests[-1]["messages"]
    assert last[1]["content"][0] == {
        "type": "thinking",
        "thinking": "Both at once.",
        "signature": "sig-1",
    }
    assert [b["id"] for b in last[1]["content"][1:]] == ["toolu_s", "toolu_w"]
    assert [(b["tool_use_id"], b["content"]) for b in last[2]["content"]] == [
        ("toolu_s", "7"),
        ("toolu_w", "sunny"),
    ]
    offered = [t["name"] for t in model.requests[-1]["tools"]]
    assert offered == ["string_length", "broken_tool", "local_weather"]


def test_a_request_with_no_server_tools_is_translated_not_passed_through(
    harness: Harness,
) -> None:
    model = Messages([text("plain")])
    _client, _, gateway = start(harness, model)
    other = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="sk-tenant-beta-CANARY-0002")
    harness.on_close(other.close)
    done = other.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
        ],
        temperature=0.5,
        stop=["END"],
        max_tokens=99,
        user="u-1",
        seed=7,
    )
    assert done.choices[0].message.content == "plain"
    [sent] = model.requests
    assert sent["system"] == [{"type": "text", "text": "Be brief."}]
    assert sent["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert (sent["stop_sequences"], sent["max_tokens"]) == (["END"], 99)
    assert sent["metadata"] == {"user_id": "u-1"}
    # Messages has no such fields (the SDK's types refuse them): left out.
    assert not {"seed", "temperature", "tools"} & set(sent)
    assert model.refused == []


def test_responses_reach_a_messages_model_too(harness: Harness) -> None:
    model = Messages(length_then_answer)
    client, _, _ = start(harness, model)
    response = client.responses.create(
        model=MODEL, input="measure example", instructions="Be exact."
    )
    assert response.output_text == "the length is 7"
    assert model.requests[0]["system"] == [{"type": "text", "text": "Be exact."}]
    assert model.refused == []


def test_openais_other_routes_are_not_sent_to_a_messages_server(harness: Harness) -> None:
    model = Messages([text("x")])
    _, _, gateway = start(harness, model)
    client = harness.client(gateway)
    answer = client.post("/v1/embeddings", json={"model": MODEL, "input": "hi"})
    assert answer.status_code == 404
    assert "'anthropic'" in answer.json()["error"]["message"]
    assert model.recorder.hits == []


def test_an_overloaded_server_is_retried_then_its_failure_is_a_502(harness: Harness) -> None:
    calls: list[int] = []

    def overloaded(hit: Received) -> Answer:
        calls.append(1)
        return Answer(529, error_body("overloaded_error", "Overloaded"))

    upstream = harness.serve(Recorder(overloaded))
    data = config(upstream.url, [])
    data["upstreams"][0].update(base_url=upstream.url, dialect="anthropic", max_retries=2)
    gateway = harness.gateway(data)
    client = harness.client(gateway)
    answer = client.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert answer.status_code == 502
    assert "Overloaded" in answer.json()["error"]["message"]
    assert len(calls) == 3  # the first try and two retries


def test_a_rate_limit_keeps_its_status_and_wait(harness: Harness) -> None:
    def limited(hit: Received) -> Answer:
        headers = [("content-type", "application/json"), ("retry-after", "30")]
        return Answer(429, error_body("rate_limit_error", "slow down"), headers)

    upstream = harness.serve(Recorder(limited))
    data = config(upstream.url, [])
    data["upstreams"][0].update(base_url=upstream.url, dialect="anthropic")
    client = harness.client(harness.gateway(data))
    answer = client.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert answer.status_code == 429
    assert answer.headers["retry-after"] == "30"
    assert answer.json()["error"]["message"] == "slow down"


def test_an_error_event_mid_stream_ends_the_stream_with_an_error(harness: Harness) -> None:
    def failing(hit: Received) -> Answer:
        start = message([])
        chunks = [
            event("message_start", {"message": {**start, "content": [], "stop_reason": None}}),
            event("content_block_start", {"index": 0, "content_block": text("")}),
            event(
                "content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "par"}}
            ),
            event("error", {"error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ]
        return Answer(headers=[("content-type", "text/event-stream")], chunks=chunks)

    upstream = harness.serve(Recorder(failing))
    data = config(upstream.url, [])
    data["upstreams"][0].update(base_url=upstream.url, dialect="anthropic")
    gateway = harness.gateway(data)
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=TENANT_KEY, timeout=WAIT_S)
    harness.on_close(client.close)
    seen: list[str] = []

    def read() -> None:
        for chunk in client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True
        ):
            seen.extend(c.delta.content or "" for c in chunk.choices)

    with pytest.raises(openai.APIError, match="Overloaded"):
        read()
    assert "".join(seen) == "par"
