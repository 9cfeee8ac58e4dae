"""``POST /v1/responses`` over the loop (docs/design.md §11), driven by the openai SDK's
``responses`` resource against a scripted chat-completions upstream and recording
tools: server tools run, client function calls are handed back and continued, stored
responses are kept per tenant, and everything sent validates against OpenAI's schema."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import openai
import pytest
from pydantic import BaseModel

from tests.support.recorder import Answer, Recorder
from tests.support.schema import assert_valid_response
from tests.support.scripted import (
    MODEL,
    OTHER_KEY,
    TENANT_KEY,
    Harness,
    Model,
    asks,
    call,
    config,
    says,
    stream_of,
    tool,
)
from tests.support.servers import ServerThread


def lengths() -> Recorder:
    def answer(hit: Any) -> Answer:
        return Answer(body=json.dumps({"length": 5}).encode())

    return Recorder(answer)


def length_tool(tools_url: str) -> dict[str, Any]:
    return tool(
        "string_length", f"{tools_url}/len", {"s": {"type": "string"}}, result={"pick": "length"}
    )


def stack(harness: Harness, model: Model) -> tuple[ServerThread, Recorder]:
    tools = lengths()
    tools_server = harness.serve(tools)
    upstream = harness.serve(model.recorder)
    return harness.gateway(config(upstream.url, [length_tool(tools_server.url)])), tools


def sdk(harness: Harness, gateway: ServerThread, key: str = TENANT_KEY) -> openai.OpenAI:
    """The stock SDK, closed with the harness."""
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)
    harness.on_close(client.close)
    return client


def create(client: openai.OpenAI, **params: Any) -> Any:
    """``responses.create``, checking the bytes the gateway sent against the schema."""
    raw = client.responses.with_raw_response.create(**params)
    assert_valid_response(json.loads(raw.text))
    return raw.parse()


def server_round(body: dict[str, Any]) -> dict[str, Any]:
    """Calls the server tool once, then answers with what it read."""
    results = [m for m in body["messages"] if m["role"] == "tool"]
    if not results:
        return asks(call("string_length", {"s": "hello"}, "c_len"))
    return says(f"The length is {results[-1]['content']}.")


def test_a_server_tool_round_answers_as_one_response(harness: Harness) -> None:
    model = Model(server_round)
    gateway, tools = stack(harness, model)
    response = create(
        sdk(harness, gateway),
        model=MODEL,
        input="How long is 'hello'?",
        instructions="Be brief.",
        store=False,
    )
    assert response.output_text == "The length is 5."
    assert response.status == "completed"
    assert [item.type for item in response.output] == ["message"]
    assert response.usage is not None
    assert response.usage.total_tokens == 10
    assert len(tools.hits) == 1
    first = model.requests[0]
    assert first["messages"][0] == {"role": "system", "content": "Be brief."}
    assert first["messages"][1] == {"role": "user", "content": "How long is 'hello'?"}
    assert [t["function"]["name"] for t in first["tools"]] == ["string_length"]


def test_a_stream_has_one_lifecycle_whatever_the_rounds(harness: Harness) -> None:
    model = Model(server_round)
    gateway, _ = stack(harness, model)
    events = events_of(gateway, {"model": MODEL, "input": "hi"})
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert kinds.count("response.completed") == 1
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == "The length is 5."
    completed = events[-1]["response"]
    assert completed["usage"]["total_tokens"] == 10
    assert [item["type"] for item in completed["output"]] == ["message"]


def test_the_sdk_stream_helper_reads_it(harness: Harness) -> None:
    gateway, _ = stack(harness, Model(server_round))
    with sdk(harness, gateway).responses.stream(model=MODEL, input="hi") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == "The length is 5."


def client_call(body: dict[str, Any]) -> dict[str, Any]:
    """Runs the server tool, then asks for the client's tool, then answers."""
    tool_messages = [m for m in body["messages"] if m["role"] == "tool"]
    if not tool_messages:
        return asks(call("string_length", {"s": "hello"}, "c_len"))
    if len(tool_messages) == 1:
        return asks(call("get_weather", {"city": "Oslo"}, "c_weather"))
    return says(f"Weather: {tool_messages[-1]['content']}; length {tool_messages[0]['content']}.")


WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


@pytest.mark.parametrize("continued_by", ["previous_response_id", "full_input"])
def test_a_client_call_is_handed_back_and_continued(harness: Harness, continued_by: str) -> None:
    model = Model(client_call)
    gateway, tools = stack(harness, model)
    client = sdk(harness, gateway)
    first = create(client, model=MODEL, input="Weather?", tools=[WEATHER])
    [handed] = [item for item in first.output if item.type == "function_call"]
    assert (handed.name, json.loads(handed.arguments)) == ("get_weather", {"city": "Oslo"})
    output: Any = {"type": "function_call_output", "call_id": handed.call_id, "output": "sunny"}
    if continued_by == "previous_response_id":
        second = create(
            client,
            model=MODEL,
            previous_response_id=first.id,
            input=[output],
            tools=[WEATHER],
        )
    else:
        replay: list[Any] = [
            {"role": "user", "content": "Weather?"},
            {
                "type": "function_call",
                "call_id": handed.call_id,
                "name": handed.name,
                "arguments": handed.arguments,
            },
            output,
        ]
        second = client.responses.create(model=MODEL, input=replay, tools=[WEATHER], store=False)  # type: ignore[list-item]
    assert second.output_text == "Weather: sunny; length 5."
    # The hidden server round came back: the model saw it, and the tool ran once.
    last = model.requests[-1]["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "tool", "assistant", "tool"]
    assert len(tools.hits) == 1


class Length(BaseModel):
    word: str
    length: int


def test_parse_keeps_the_json_schema_on_every_round(harness: Harness) -> None:
    def structured(body: dict[str, Any]) -> dict[str, Any]:
        if not any(m["role"] == "tool" for m in body["messages"]):
            return asks(call("string_length", {"s": "hello"}, "c_len"))
        return says('{"word": "hello", "length": 5}')

    model = Model(structured)
    gateway, _ = stack(harness, model)
    parsed = sdk(harness, gateway).responses.parse(model=MODEL, input="hello?", text_format=Length)
    assert parsed.output_parsed == Length(word="hello", length=5)
    formats = [r["response_format"] for r in model.requests]
    assert all(f["type"] == "json_schema" for f in formats)
    assert formats[0] == formats[1]


def test_stored_responses_are_the_tenants_own(harness: Harness) -> None:
    gateway, _ = stack(harness, Model(says("hi there")))
    client = sdk(harness, gateway)
    created = create(client, model=MODEL, input="hello", metadata={"k": "v"})
    fetched = client.responses.retrieve(created.id)
    assert fetched.output_text == "hi there"
    assert fetched.metadata == {"k": "v"}
    items = client.responses.input_items.list(created.id)
    assert [item.type for item in items.data] == ["message"]
    other = sdk(harness, gateway, OTHER_KEY)
    with pytest.raises(openai.NotFoundError):
        other.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        other.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        other.responses.create(model=MODEL, input="more", previous_response_id=created.id)
    client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"background": True}, "background"),
        # A hosted type (web_search) is the tenant's hosted_tools to decide:
        # tests/e2e/test_hosted_tools_e2e.py.
        ({"tools": [{"type": "custom", "name": "c", "format": {"type": "x"}}]}, "tools[0].format"),
        ({"truncation": "middle"}, "truncation"),
        ({"context_management": [{"type": "other"}]}, "context_management[0]"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
        ({"tool_choice": {"type": "mcp", "server_label": "x"}}, "tool_choice"),
    ],
)
def test_what_cannot_be_honoured_is_a_400_naming_it(
    harness: Harness, extra: dict[str, Any], param: str
) -> None:
    model = Model(says("never"))
    gateway, _ = stack(harness, model)
    body = {"model": MODEL, "input": "hi", **extra}
    response = httpx.post(
        f"{gateway.url}/v1/responses", json=body, headers={"authorization": f"Bearer {TENANT_KEY}"}
    )
    assert response.status_code == 400, response.text
    assert_valid_response(response.json(), "ErrorResponse")
    assert response.json()["error"]["param"] == param
    assert model.requests == []


def test_previous_response_id_continues_on_another_replica(
    harness: Harness, redis_url: str, redis_prefix: str
) -> None:
    model = Model(client_call)
    tools = lengths()
    tools_server, upstream = harness.serve(tools), harness.serve(model.recorder)
    definition = length_tool(tools_server.url)
    data = config(
        upstream.url,
        [definition],
        store={"url": redis_url, "prefix": redis_prefix, "timeout_s": 2.0},
    )
    one, two = harness.gateway(data), harness.gateway(data)
    first = create(sdk(harness, one), model=MODEL, input="Weather?", tools=[WEATHER])
    [handed] = [item for item in first.output if item.type == "function_call"]
    output: Any = {"type": "function_call_output", "call_id": handed.call_id, "output": "rain"}
    second = create(
        sdk(harness, two),
        model=MODEL,
        previous_response_id=first.id,
        input=[output],
        tools=[WEATHER],
    )
    assert second.output_text == "Weather: rain; length 5."
    assert second.previous_response_id == first.id
    assert sdk(harness, two).responses.retrieve(first.id).id == first.id


def events_of(gateway: ServerThread, body: dict[str, Any]) -> list[dict[str, Any]]:
    headers = {"authorization": f"Bearer {TENANT_KEY}"}
    with (
        httpx.Client(base_url=gateway.url, headers=headers, timeout=10) as client,
        client.stream("POST", "/v1/responses", json={**body, "stream": True}) as r,
    ):
        assert r.status_code == 200, r.read()
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    events = [json.loads(line.removeprefix("data: ")) for line in lines]
    for event in events:
        assert_valid_response(event, "ResponseStreamEvent")
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events


def test_a_streamed_hand_back_is_function_call_items(harness: Harness) -> None:
    gateway, _ = stack(harness, Model(client_call))
    events = events_of(gateway, {"model": MODEL, "input": "Weather?", "tools": [WEATHER]})
    added = [e["item"] for e in events if e["type"] == "response.output_item.added"]
    assert [item["type"] for item in added] == ["function_call"]
    [done] = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert (done["name"], json.loads(done["arguments"])) == ("get_weather", {"city": "Oslo"})
    completed = events[-1]
    assert completed["type"] == "response.completed"
    [item] = completed["response"]["output"]
    assert item["type"] == "function_call"
    assert item["call_id"] == "c_weather"
    assert [e["output_index"] for e in events if "output_index" in e] == [0] * 4


def test_a_failure_after_the_first_event_is_an_error_then_response_failed(
    harness: Harness,
) -> None:
    def upstream(hit: Any) -> Answer:
        body = json.loads(hit.body)
        if any(m["role"] == "tool" for m in body["messages"]):
            return Answer(500, b'{"error": {"message": "down"}}')  # the second round fails
        message = asks(call("string_length", {"s": "hello"}, "c_len"))
        return Answer(headers=[("content-type", "text/event-stream")], chunks=stream_of(message))

    tools = lengths()
    tools_server, model = harness.serve(tools), harness.serve(Recorder(upstream))
    definition = tool("string_length", f"{tools_server.url}/len", {"s": {"type": "string"}})
    gateway = harness.gateway(config(model.url, [definition]))
    events = events_of(gateway, {"model": MODEL, "input": "hi"})
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-2:] == ["error", "response.failed"]
    assert events[-1]["response"]["status"] == "failed"
    assert events[-1]["response"]["error"]["code"] == "server_error"
    assert len(tools.hits) == 1


def test_a_conversation_keeps_the_thread_and_its_hidden_rounds(harness: Harness) -> None:
    model = Model(server_round, says("It was 5."))
    gateway, tools = stack(harness, model)
    client = sdk(harness, gateway)
    conversation = client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "Remember: count letters."}],
        metadata={"topic": "lengths"},
    )
    first = create(client, model=MODEL, input="How long is 'hello'?", conversation=conversation.id)
    assert first.conversation is not None
    assert first.conversation.id == conversation.id
    second = create(client, model=MODEL, input="What was it?", conversation=conversation.id)
    assert second.output_text == "It was 5."
    # The second request read the whole thread, the hidden tool round included.
    roles = [m["role"] for m in model.requests[-1]["messages"]]
    assert roles == ["user", "user", "assistant", "tool", "assistant", "user"]
    listed = client.conversations.items.list(conversation.id, order="asc")
    kinds = [(item.type, getattr(item, "role", None)) for item in listed.data]
    roles_listed = ["user", "user", "assistant", "user", "assistant"]
    assert kinds == [("message", role) for role in roles_listed]
    # Deleting an item takes it out of what the model reads.
    first_item = listed.data[0].id
    assert first_item is not None
    client.conversations.items.delete(first_item, conversation_id=conversation.id)
    create(client, model=MODEL, input="Again?", conversation=conversation.id)
    assert "Remember: count letters." not in json.dumps(model.requests[-1]["messages"])
    assert client.conversations.retrieve(conversation.id).metadata == {"topic": "lengths"}
    with pytest.raises(openai.NotFoundError):
        sdk(harness, gateway, OTHER_KEY).conversations.retrieve(conversation.id)
    client.conversations.delete(conversation.id)
    with pytest.raises(openai.NotFoundError):
        create(client, model=MODEL, input="gone?", conversation=conversation.id)
    assert len(tools.hits) == 1


def test_the_surface_is_traced_metered_and_logged_like_chat(harness: Harness) -> None:
    gateway, _ = stack(harness, Model(server_round))
    client = harness.client(gateway)
    answer = client.post("/v1/responses", json={"model": MODEL, "input": "hi", "store": False})
    assert answer.status_code == 200
    assert answer.headers["x-toolgate-tool-calls"] == "1"
    trace = client.get(f"/v1/toolgate/traces/{answer.headers['x-request-id']}").json()
    assert [call["name"] for call in trace["tool_calls"]] == ["string_length"]
    assert trace["iterations"] == 2
    metrics = client.get("/metrics").text
    assert f'toolgate_requests_total{{model="{MODEL}",status="2xx",tenant="acme"}} 1.0' in metrics
    series = 'outcome="ok",source="http",tenant="acme",tool="string_length"'
    assert f"toolgate_tool_calls_total{{{series}}} 1.0" in metrics


def remembering(body: dict[str, Any]) -> dict[str, Any]:
    """A model that summarises when asked to (keeping every fact it read), and answers
    "what was fact 1?" from whatever its context holds."""
    messages = body["messages"]
    text = "\n".join(str(m.get("content")) for m in messages)
    last = str(messages[-1]["content"])
    if last.startswith("Summarise the conversation above"):
        facts = [line for line in text.splitlines() if "fact " in line and "=" in line]
        return says("\n".join(sorted(set(facts))))
    if last.startswith("What was fact 1?"):
        found = [line for line in text.splitlines() if line.strip().startswith("fact 1 =")]
        return says(found[0].split("=")[1].split()[0] if found else "I do not know.")
    return says("Noted.")


def test_fifty_turns_compacted_still_know_the_first_fact(harness: Harness) -> None:
    model = Model(remembering)
    upstream = harness.serve(model.recorder)
    gateway = harness.gateway(config(upstream.url, []))
    client = sdk(harness, gateway)
    management: Any = [{"type": "compaction", "compact_threshold": 400}]
    previous = None
    for turn in range(1, 51):
        response = create(
            client,
            model=MODEL,
            input=f"fact {turn} = value-{turn} " + "padding " * 20,
            previous_response_id=previous,
            context_management=management,
        )
        previous = response.id
    final = create(
        client,
        model=MODEL,
        input="What was fact 1?",
        previous_response_id=previous,
        context_management=management,
    )
    assert final.output_text == "value-1"
    summaries = [r for r in model.requests if "Summarise the conversation" in json.dumps(r)]
    assert len(summaries) >= 5  # compacted again and again, as the thread grew
    # The stored state stays bounded: the last request read a summary and a few turns.
    assert len(model.requests[-1]["messages"]) <= 10
    assert final.usage is not None
    assert final.usage.total_tokens > 5  # the summary's round counted with the answer's


def test_truncation_auto_fits_the_models_context(harness: Harness) -> None:
    model = Model(says("ok"))
    upstream = harness.serve(model.recorder)
    data = config(upstream.url, [])
    data["models"][0]["context_tokens"] = 300
    gateway = harness.gateway(data)
    long_history: Any = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "x" * 200}
        for i in range(20)
    ]
    long_history.append({"role": "user", "content": "the question"})
    create(sdk(harness, gateway), model=MODEL, input=long_history, truncation="auto", store=False)
    sent = model.requests[-1]["messages"]
    assert sent[-1] == {"role": "user", "content": "the question"}
    assert 1 <= len(sent) < len(long_history)
    create(sdk(harness, gateway), model=MODEL, input=long_history, store=False)
    assert len(model.requests[-1]["messages"]) == len(long_history)  # disabled: all of it


def test_with_no_server_tools_a_native_upstream_gets_the_request_untouched(
    harness: Harness,
) -> None:
    native = Recorder(
        lambda hit: Answer(body=json.dumps({"id": "resp_up", "model": "up"}).encode())
    )
    upstream = harness.serve(native)
    data = config(upstream.url, [])
    data["upstreams"][0]["responses_api"] = True
    gateway = harness.gateway(data)
    body = {"model": MODEL, "input": "hi", "include": ["reasoning.encrypted_content"]}
    plain = harness.client(gateway, OTHER_KEY).post("/v1/responses", json=body)
    assert plain.status_code == 200
    assert plain.json() == {"id": "resp_up", "model": "up"}
    [hit] = native.hits
    assert hit.raw_path == "/v1/responses"
    assert json.loads(hit.body) == body


def test_keep_alive_comments_cover_slow_tools_in_a_stream(harness: Harness) -> None:
    def slow(hit: Any) -> Answer:
        time.sleep(0.3)
        return Answer(body=b'{"length": 5}')

    tools = Recorder(slow)
    model = Model(server_round)
    tools_server, upstream = harness.serve(tools), harness.serve(model.recorder)
    definition = length_tool(tools_server.url)
    data = config(upstream.url, [definition], server={"stream_keepalive_s": 0.05})
    gateway = harness.gateway(data)
    headers = {"authorization": f"Bearer {TENANT_KEY}"}
    body = {"model": MODEL, "input": "hi", "stream": True}
    with (
        httpx.Client(base_url=gateway.url, headers=headers, timeout=10) as client,
        client.stream("POST", "/v1/responses", json=body) as r,
    ):
        lines = list(r.iter_lines())
    comments = [line for line in lines if line.startswith(":")]
    assert len(comments) >= 2  # every 50 ms of the tool's 300
    events = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
    assert events[-1]["type"] == "response.completed"
