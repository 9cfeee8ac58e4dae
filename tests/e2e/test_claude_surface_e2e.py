"""Anthropic's Messages API as a surface (``POST /v1/messages``, docs/claude.md), driven by
the stock ``anthropic`` SDK: server tools run hidden, the client's own tools come back as
``tool_use`` blocks and its ``tool_result`` answers continue the turn, streamed and not;
errors in Anthropic's shape; ``count_tokens``; and any dialect behind it — a
chat-completions server, or a Messages server whose thinking the client asked to see."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest

from tests.support.anthropic_upstream import Messages, text, thinking, tool_use
from tests.support.recorder import Answer, Received, Recorder
from tests.support.scripted import (
    MODEL,
    TENANT_KEY,
    Harness,
    Model,
    asks,
    call,
    config,
    says,
    sse,
    tool,
)
from tests.support.servers import WAIT_S, ServerThread

WEATHER: Any = {
    "name": "local_weather",
    "description": "The weather where the user is.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def _tools(hit: Received) -> Answer:
    return Answer(body=json.dumps({"length": 7}).encode())


def start(
    harness: Harness, upstream: Recorder, dialect: str = "openai"
) -> tuple[anthropic.Anthropic, Recorder, ServerThread]:
    served = harness.serve(upstream)
    tools = Recorder(_tools)
    tools_url = harness.serve(tools).url
    length = tool(
        "string_length",
        f"{tools_url}/len",
        {"s": {"type": "string"}},
        http={"url": f"{tools_url}/len", "query": {"s": "{s}"}},
        result={"pick": "length"},
    )
    data = config(served.url, [length])
    if dialect == "anthropic":
        data["upstreams"][0].update(base_url=served.url, dialect="anthropic")
    gateway = harness.gateway(data)
    client = anthropic.Anthropic(
        base_url=gateway.url, api_key=TENANT_KEY, timeout=WAIT_S, max_retries=0
    )
    harness.on_close(client.close)
    return client, tools, gateway


def length_then_answer(body: dict[str, Any]) -> dict[str, Any]:
    if body["messages"][-1]["role"] == "tool":
        return says(f"the length is {body['messages'][-1]['content']}")
    return asks(call("string_length", {"s": "example"}))


@pytest.mark.parametrize("stream", [False, True])
def test_a_server_tool_round_runs_hidden(harness: Harness, stream: bool) -> None:
    model = Model(length_then_answer)
    client, tools, _ = start(harness, model.recorder)
    asked: Any = {
        "model": MODEL,
        "max_tokens": 200,
        "system": "Be exact.",
        "messages": [{"role": "user", "content": "measure example"}],
    }
    if stream:
        with client.messages.stream(**asked) as events:
            pieces = list(events.text_stream)
            answer = events.get_final_message()
        assert "".join(pieces) == "the length is 7"
    else:
        answer = client.messages.create(**asked)
    assert [block.type for block in answer.content] == ["text"]
    assert answer.content[0].type == "text"
    assert answer.content[0].text == "the length is 7"
    assert answer.stop_reason == "end_turn"
    assert answer.model == MODEL
    assert answer.usage.input_tokens == 6
    assert answer.usage.output_tokens == 4
    assert len(tools.hits) == 1
    first = model.requests[0]
    assert first["messages"][:2] == [
        {"role": "system", "content": "Be exact."},
        {"role": "user", "content": "measure example"},
    ]
    assert first["max_tokens"] == 200


@pytest.mark.parametrize("stream", [False, True])
def test_the_clients_tool_comes_back_and_its_answer_continues_the_turn(
    harness: Harness, stream: bool
) -> None:
    def mixed(body: dict[str, Any]) -> dict[str, Any]:
        last = body["messages"][-1]
        if last["role"] == "tool" and last["tool_call_id"] == "call_w":
            return says("sunny, and 7 letters")
        return asks(
            call("string_length", {"s": "example"}, "call_s"),
            call("local_weather", {"city": "Oslo"}, "call_w"),
        )

    model = Model(mixed)
    client, tools, _ = start(harness, model.recorder)
    history: list[Any] = [{"role": "user", "content": "weather and length"}]
    asked: Any = {"model": MODEL, "max_tokens": 100, "tools": [WEATHER]}
    if stream:
        with client.messages.stream(messages=history, **asked) as events:
            first = events.get_final_message()
    else:
        first = client.messages.create(messages=history, **asked)
    assert first.stop_reason == "tool_use"
    [handed] = first.content
    assert handed.type == "tool_use"
    assert (handed.id, handed.name, handed.input) == ("call_w", "local_weather", {"city": "Oslo"})
    assert len(tools.hits) == 1

    history.append({"role": "assistant", "content": [handed.model_dump()]})
    history.append(
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "call_w", "content": "sunny"}],
        }
    )
    done = client.messages.create(messages=history, **asked)
    assert done.content[0].type == "text"
    assert done.content[0].text == "sunny, and 7 letters"
    # The server's half of the turn was put back: both calls, both results.
    sent = model.requests[-1]["messages"]
    assert [c["id"] for c in sent[1]["tool_calls"]] == ["call_s", "call_w"]
    assert [(m["tool_call_id"], m["content"]) for m in sent[2:4]] == [
        ("call_s", "7"),
        ("call_w", "sunny"),
    ]
    offered = [t["function"]["name"] for t in model.requests[-1]["tools"]]
    assert offered == ["string_length", "local_weather"]


def test_errors_are_in_anthropics_shape(harness: Harness) -> None:
    client, _, gateway = start(harness, Model(says("x")).recorder)
    wrong = anthropic.Anthropic(base_url=gateway.url, api_key="sk-nobody", max_retries=0)
    harness.on_close(wrong.close)
    with pytest.raises(anthropic.AuthenticationError) as denied:
        wrong.messages.create(
            model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    assert denied.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(model=MODEL, max_tokens=5, messages=[])
    assert bad.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(
            model="no-such-model", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    raw = httpx.post(
        f"{gateway.url}/v1/messages",
        content=b"{not json",
        headers={"x-api-key": TENANT_KEY, "content-type": "application/json"},
        timeout=WAIT_S,
    )
    assert raw.status_code == 400
    body = raw.json()
    assert body["type"] == "error"
    assert set(body["error"]) == {"type", "message"}
    assert body["request_id"] == raw.headers["request-id"]


def test_the_key_may_come_as_x_api_key_and_tokens_are_counted(harness: Harness) -> None:
    client, _, gateway = start(harness, Model(says("hello")).recorder)
    answered = httpx.post(
        f"{gateway.url}/v1/messages",
        json={"model": MODEL, "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-api-key": TENANT_KEY, "anthropic-version": "2023-06-01"},
        timeout=WAIT_S,
    )
    assert answered.status_code == 200, answered.text
    assert answered.json()["content"] == [{"type": "text", "text": "hello"}]
    counted = client.messages.count_tokens(
        model=MODEL, messages=[{"role": "user", "content": "hello there " * 40}], tools=[WEATHER]
    )
    assert 100 < counted.input_tokens < 1000


def test_a_messages_model_shows_its_thinking_to_a_client_that_asked(harness: Harness) -> None:
    def think_then_answer(body: dict[str, Any]) -> list[dict[str, Any]]:
        if body["messages"][-1]["content"][0].get("type") == "tool_result":
            return [thinking("Now I know.", "sig-2"), text("7")]
        return [thinking("Measure first."), tool_use("string_length", {"s": "example"})]

    model = Messages(think_then_answer)
    client, _, _ = start(harness, model.recorder, dialect="anthropic")
    answer = client.messages.create(
        model=MODEL,
        max_tokens=2048,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=[{"role": "user", "content": "how long is example?"}],
    )
    assert [b.type for b in answer.content] == ["thinking", "text"]
    assert answer.content[0].type == "thinking"
    assert answer.content[0].signature == "sig-2"
    assert model.refused == []
    first, second = model.requests
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert second["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "Measure first.",
        "signature": "sig-1",
    }
    plain = client.messages.create(
        model=MODEL, max_tokens=2048, messages=[{"role": "user", "content": "again?"}]
    )
    assert [b.type for b in plain.content] == ["text"]  # not asked: not shown


def vllm_stopped(hit: Received) -> Answer:
    """A vLLM server that stopped at the client's stop sequence: it says which in the
    choice's ``stop_reason`` (OpenAI's API does not say)."""
    body = json.loads(hit.body)
    choice: dict[str, Any] = {"index": 0, "finish_reason": "stop", "stop_reason": "END"}
    head = {"id": "chatcmpl-v", "created": 1, "model": MODEL}
    if not body.get("stream"):
        choice["message"] = {"role": "assistant", "content": "one two"}
        answer = {**head, "object": "chat.completion", "choices": [choice]}
        return Answer(body=json.dumps(answer).encode())
    chunk = {**head, "object": "chat.completion.chunk"}
    said = {"index": 0, "delta": {"role": "assistant", "content": "one two"}}
    ended = {**choice, "delta": {}}
    return Answer(
        headers=[("content-type", "text/event-stream")],
        chunks=sse(
            {**chunk, "choices": [{**said, "finish_reason": None}]},
            {**chunk, "choices": [ended]},
        ),
    )


@pytest.mark.parametrize("dialect", ["anthropic", "openai"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_stop_sequence_is_reported_as_one(harness: Harness, dialect: str, stream: bool) -> None:
    """Issue 62 §7: a round that ended at the client's stop sequence says so, and which,
    where the upstream says it (Anthropic's ``stop_sequence``, vLLM's ``stop_reason``)."""
    upstream = (
        Messages([text("one two")], stop_sequence="END").recorder
        if dialect == "anthropic"
        else Recorder(vllm_stopped)
    )
    client, _, _ = start(harness, upstream, dialect=dialect)
    asked: Any = {
        "model": MODEL,
        "max_tokens": 50,
        "stop_sequences": ["END"],
        "messages": [{"role": "user", "content": "count"}],
    }
    if stream:
        with client.messages.stream(**asked) as events:
            answer = events.get_final_message()
    else:
        answer = client.messages.create(**asked)
    assert answer.content[0].type == "text"
    assert answer.content[0].text == "one two"
    assert answer.stop_reason == "stop_sequence"
    assert answer.stop_sequence == "END"


@pytest.mark.parametrize("stream", [False, True])
def test_a_stop_sequence_the_client_never_asked_for_is_not_passed_on(
    harness: Harness, stream: bool
) -> None:
    """An upstream that names a sequence the client did not send: the answer says it
    stopped at one, and not the upstream's words."""
    client, _, _ = start(
        harness,
        Messages([text("one two")], stop_sequence="NOT-ASKED").recorder,
        dialect="anthropic",
    )
    asked: Any = {
        "model": MODEL,
        "max_tokens": 50,
        "stop_sequences": ["END"],
        "messages": [{"role": "user", "content": "count"}],
    }
    if stream:
        with client.messages.stream(**asked) as events:
            answer = events.get_final_message()
    else:
        answer = client.messages.create(**asked)
    assert answer.stop_reason == "stop_sequence"
    assert answer.stop_sequence is None
