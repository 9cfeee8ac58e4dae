"""The Responses surface's pure parts: reading requests, items into messages, the
response and its events — from tables, and fuzzed: whatever a client sends is a
request the loop can run or a 400, and what the gateway renders is valid."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.chat_json import encode_messages, encode_parameters, encode_tools
from gateway.errors import BadRequest, UpstreamError
from gateway.surfaces.responses.items import (
    ClientName,
    custom_input,
    stored_items,
    usage_of,
)
from gateway.surfaces.responses.items import (
    to_messages as item_messages,
)
from gateway.surfaces.responses.render import ResponseEvents, ResponseShape, output_of
from gateway.surfaces.responses.request import parse_responses_request
from gateway.values import AssistantMessage, ChoiceDelta, ToolCall
from tests.support.schema import assert_valid_response


def to_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages input items stand for, in the dialect the model server reads."""
    return encode_messages(item_messages(items))


def parse(**body: Any) -> Any:
    return parse_responses_request(json.dumps({"model": "m", **body}).encode(), {})


def test_input_items_become_the_dialects_messages() -> None:
    items: list[dict[str, Any]] = [
        {"role": "developer", "content": "Be brief."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Let me see."}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": '{"x":1}'},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {
            "type": "function_call_output",
            "call_id": "c2",
            "output": [{"type": "input_text", "text": "two"}],
        },
        {"role": "user", "content": [{"type": "input_image", "image_url": "https://x/i.png"}]},
    ]
    assert to_messages(items) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {
            "role": "assistant",
            "content": "Let me see.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"id": "c2", "type": "function", "function": {"name": "g", "arguments": '{"x":1}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "https://x/i.png"}}],
        },
    ]


def test_the_request_becomes_the_dialects_parameters() -> None:
    asked = parse(
        input="hi",
        instructions="Be brief.",
        temperature=0.2,
        max_output_tokens=50,
        tool_choice={"type": "function", "name": "f"},
        parallel_tool_calls=False,
        text={"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}}},
        reasoning={"effort": "low"},
        tools=[{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        max_tool_calls=3,
        toolgate={"max_tool_calls": 5},
    )
    assert encode_parameters(asked.params) == {
        "temperature": 0.2,
        "max_tokens": 50,
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "parallel_tool_calls": False,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "out", "schema": {"type": "object"}},
        },
        "reasoning_effort": "low",
    }
    assert encode_tools(asked.client_tools) == [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    ]
    assert asked.narrowing.max_tool_calls == 3  # the narrowest of both
    assert asked.items == [{"type": "message", "role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "input"),
        ({"input": 3}, "input"),
        ({"input": "x", "background": True}, "background"),
        ({"input": "x", "max_output_tokens": 1.5}, "max_output_tokens"),
        ({"input": "x", "metadata": {"k": 1}}, "metadata"),
        ({"input": "x", "reasoning": "high"}, "reasoning"),
        ({"input": "x", "max_tool_calls": -1}, "max_tool_calls"),
        ({"input": "x", "text": {"format": {"type": "json_schema"}}}, "text.format"),
        ({"input": [{"role": ["user"], "content": "x"}]}, "input[0].role"),
        ({"input": [{"type": "function_call", "name": "f"}]}, "input[0]"),
    ],
)
def test_what_the_gateway_cannot_read_is_a_400_naming_it(body: dict[str, Any], param: str) -> None:
    with pytest.raises(BadRequest) as raised:
        to_messages(parse(**body).items)
    assert raised.value.param == param


def test_usage_is_counted_as_the_responses_api_does() -> None:
    totals = {
        "prompt_tokens": 10,
        "completion_tokens": 4,
        "total_tokens": 14,
        "prompt_tokens_details": {"cached_tokens": 3},
        "completion_tokens_details": {"reasoning_tokens": 2},
    }
    assert usage_of(totals) == {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 3, "cache_write_tokens": 0},
        "output_tokens": 4,
        "output_tokens_details": {"reasoning_tokens": 2},
        "total_tokens": 14,
    }


def test_every_event_of_a_lifecycle_is_valid_and_numbered() -> None:
    writer = ResponseEvents(ResponseShape(parse(input="hi")))
    chunks = [
        *writer.open(),
        *writer.choice_delta(ChoiceDelta({"content": "Hel"})),
        *writer.choice_delta(ChoiceDelta({"refusal": "no"})),
        *writer.choice_delta(ChoiceDelta({"content": "lo"})),
        *writer.hand_back([ToolCall("c1", "f", '{"a": 1}')]),
        *writer.close(writer.last({"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2})),
    ]
    events = [json.loads(chunk.removeprefix(b"data: ")) for chunk in chunks]
    for event in events:
        assert_valid_response(event, "ResponseStreamEvent")
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    output = events[-1]["response"]["output"]
    assert [item["type"] for item in output] == ["message", "function_call"]
    assert [part["type"] for part in output[0]["content"]] == [
        "output_text",
        "refusal",
        "output_text",
    ]
    error = writer.error(UpstreamError("gone"))
    failed = [json.loads(e) for e in error.decode().split("data: ") if e.strip()]
    assert [e["type"] for e in failed] == ["error", "response.failed"]
    for event in failed:
        assert_valid_response(event, "ResponseStreamEvent")


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)
_FIELDS = st.sampled_from(
    [
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "text",
        "temperature",
        "top_p",
        "max_output_tokens",
        "metadata",
        "parallel_tool_calls",
        "reasoning",
        "store",
        "previous_response_id",
        "max_tool_calls",
        "user",
        "stream",
    ]
)
_ITEM = st.fixed_dictionaries(
    {
        "type": st.sampled_from(
            ["message", "function_call", "function_call_output", "reasoning", "x"]
        )
    },
    optional={
        "role": st.sampled_from(["user", "assistant", "system", "developer", "tool"]) | _JSON,
        "content": st.text(max_size=5)
        | st.lists(
            st.dictionaries(
                st.sampled_from(["type", "text", "image_url"]),
                _JSON | st.sampled_from(["input_text", "output_text", "input_image"]),
            )
        ),
        "call_id": st.text(max_size=5) | _JSON,
        "name": st.text(max_size=5) | _JSON,
        "arguments": st.text(max_size=5) | _JSON,
        "output": st.text(max_size=5) | _JSON,
    },
)


@given(
    st.dictionaries(_FIELDS, _JSON, max_size=6),
    st.lists(_ITEM, max_size=4),
)
def test_any_request_is_runnable_or_a_400_and_renders_valid(
    fields: dict[str, Any], items: list[dict[str, Any]]
) -> None:
    body = {"model": "m", "input": items, **fields}
    try:
        asked = parse_responses_request(json.dumps(body).encode(), {})
        messages = to_messages(asked.items)
    except BadRequest:
        return  # an error the client can read (the envelope is tested end to end)
    assert all(m["role"] in ("system", "user", "assistant", "tool") for m in messages)
    shape = ResponseShape(asked)
    turn = AssistantMessage("answer")
    response = shape.response("completed", output_of(turn, [ToolCall("c", "f", "{}")]), {})
    assert_valid_response(response)


def test_every_stored_item_has_an_id_to_page_by() -> None:
    items: list[dict[str, Any]] = [
        {"type": "reasoning", "summary": []},
        {"role": "user", "content": "hi", "id": 5},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}", "id": "fc_1"},
    ]
    stored = stored_items(items)
    assert all(isinstance(item["id"], str) for item in stored)
    assert stored[2]["id"] == "fc_1"  # the client's own id is kept
    assert stored[1]["content"] == [{"type": "input_text", "text": "hi"}]


@pytest.mark.parametrize(
    ("tools", "functions", "hosted"),
    [
        ([{"type": "web_search"}], [], [(0, "web_search")]),
        (
            [{"type": "function", "name": "f"}, {"type": "file_search"}, {"type": "mcp"}],
            ["f"],
            [(1, "file_search"), (2, "mcp")],
        ),
        (
            [{"type": "image_generation"}, {"type": "function", "name": "g"}],
            ["g"],
            [(0, "image_generation")],
        ),
        ([], [], []),
    ],
)
def test_hosted_tool_types_are_told_apart_from_function_tools(
    tools: list[dict[str, Any]], functions: list[str], hosted: list[tuple[int, str]]
) -> None:
    raw = json.dumps({"model": "m", "input": "hi", "tools": tools}).encode()
    asked = parse_responses_request(raw, {})
    assert sorted(asked.client_tool_names) == functions
    assert [(h.index, h.type) for h in asked.hosted] == hosted


def test_a_namespace_is_flattened_under_names_a_chat_model_takes() -> None:
    long = "n" * 40
    tools = [
        {"type": "namespace", "name": "crm", "tools": [{"type": "function", "name": "find"}]},
        {"type": "namespace", "name": long, "tools": [{"type": "function", "name": "x" * 40}]},
        {"type": "function", "name": "plain"},
    ]
    raw = json.dumps({"model": "m", "input": "hi", "tools": tools}).encode()
    asked = parse_responses_request(raw, {})
    flat = [tool.name for tool in asked.client_tools]
    assert flat[0] == "crm__find"
    assert flat[2] == "plain"
    assert len(flat[1]) == 64
    assert flat[1].startswith(long + "__")
    assert dict(asked.client_names) == {
        "crm__find": ClientName("find", "crm"),
        flat[1]: ClientName("x" * 40, long),
    }
    assert asked.client_tool_names == frozenset(flat)
    again = parse_responses_request(raw, {})  # the same name every time
    assert [tool.name for tool in again.client_tools] == flat


def test_a_namespaced_call_item_goes_back_under_the_name_the_model_knows() -> None:
    item = {
        "type": "function_call",
        "call_id": "c",
        "name": "find",
        "namespace": "crm",
        "arguments": "{}",
    }
    [message] = to_messages([item])
    assert message["tool_calls"][0]["function"]["name"] == "crm__find"


_GRAMMAR = {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch"'}


@pytest.mark.parametrize(
    ("tool", "description"),
    [
        ({"type": "custom", "name": "note"}, None),
        ({"type": "custom", "name": "note", "format": {"type": "text"}}, None),
        ({"type": "custom", "name": "note", "description": "Takes a note."}, "Takes a note."),
        (
            {"type": "custom", "name": "note", "description": "Patches.", "format": _GRAMMAR},
            'Patches.\n\n`input` must follow this lark grammar:\nstart: "*** Begin Patch"',
        ),
        (
            {"type": "custom", "name": "note", "format": {**_GRAMMAR, "syntax": "regex"}},
            '`input` must follow this regex grammar:\nstart: "*** Begin Patch"',
        ),
    ],
)
def test_a_custom_tool_is_offered_as_a_function_of_one_string(
    tool: dict[str, Any], description: str | None
) -> None:
    asked = parse(input="hi", tools=[tool])
    [function] = [t["function"] for t in encode_tools(asked.client_tools)]
    assert function["name"] == "note"
    assert function.get("description") == description
    assert function["parameters"]["properties"]["input"]["type"] == "string"
    assert function["parameters"]["required"] == ["input"]
    assert dict(asked.client_names) == {"note": ClientName("note", None, custom=True)}


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"type": "custom"}, "tools[0].name"),
        ({"type": "custom", "name": "n", "format": {"type": "grammar"}}, "tools[0].format"),
        (
            {"type": "custom", "name": "n", "format": {**_GRAMMAR, "syntax": "ebnf"}},
            "tools[0].format",
        ),
        ({"type": "custom", "name": "n", "format": "text"}, "tools[0].format"),
        (
            {"type": "namespace", "name": "n", "tools": [{"type": "web_search"}]},
            "tools[0].tools[0].type",
        ),
    ],
)
def test_a_custom_tool_the_gateway_cannot_offer_is_a_400_naming_it(
    tool: dict[str, Any], param: str
) -> None:
    with pytest.raises(BadRequest) as raised:
        parse(input="hi", tools=[tool])
    assert raised.value.param == param


def test_a_custom_tool_in_a_namespace_is_named_by_both() -> None:
    tools = [
        {
            "type": "namespace",
            "name": "fs",
            "description": "Files.",
            "tools": [
                {"type": "custom", "name": "apply_patch", "format": _GRAMMAR},
                {"type": "function", "name": "read"},
            ],
        }
    ]
    asked = parse(input="hi", tools=tools)
    assert dict(asked.client_names) == {
        "fs__apply_patch": ClientName("apply_patch", "fs", custom=True),
        "fs__read": ClientName("read", "fs"),
    }
    described = asked.client_tools[0].description
    assert described.startswith("Files.\n\n`input` must follow this lark grammar")


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"input": "*** Begin Patch"}', "*** Begin Patch"),
        ('{"input": ""}', ""),
        ('{"patch": "renamed by the model"}', "renamed by the model"),  # the one string
        ('{"input": 5}', '{"input": 5}'),  # not a string: as written
        ('{"a": "x", "b": "y"}', '{"a": "x", "b": "y"}'),
        ("not json at all", "not json at all"),
        ('["input"]', '["input"]'),
        ("", ""),
    ],
)
def test_a_custom_calls_input_is_its_one_string_argument(arguments: str, expected: str) -> None:
    assert custom_input(arguments) == expected


_NAMES = {
    "note": ClientName("note", None, custom=True),
    "fs__apply_patch": ClientName("apply_patch", "fs", custom=True),
    "fs__read": ClientName("read", "fs"),
}


@pytest.mark.parametrize(
    ("call", "item"),
    [
        (
            ToolCall("c1", "note", '{"input": "remember"}'),
            {"type": "custom_tool_call", "call_id": "c1", "name": "note", "input": "remember"},
        ),
        (
            ToolCall("c2", "fs__apply_patch", '{"input": "*** Begin Patch"}'),
            {
                "type": "custom_tool_call",
                "call_id": "c2",
                "name": "apply_patch",
                "namespace": "fs",
                "input": "*** Begin Patch",
            },
        ),
        (
            ToolCall("c3", "fs__read", '{"path": "a"}'),
            {
                "type": "function_call",
                "call_id": "c3",
                "name": "read",
                "namespace": "fs",
                "arguments": '{"path": "a"}',
                "status": "completed",
            },
        ),
        (
            ToolCall("c4", "plain", "{}"),
            {
                "type": "function_call",
                "call_id": "c4",
                "name": "plain",
                "arguments": "{}",
                "status": "completed",
            },
        ),
    ],
)
def test_a_call_goes_back_in_the_shape_of_the_clients_tool_and_returns_as_the_model_made_it(
    call: ToolCall, item: dict[str, Any]
) -> None:
    [rendered] = output_of(AssistantMessage(None), [call], _NAMES)  # no text: the call alone
    assert {k: v for k, v in rendered.items() if k != "id"} == item
    prefix = "ctc_" if item["type"] == "custom_tool_call" else "fc_"
    assert rendered["id"].startswith(prefix)
    # The client sends it back with its output: the model sees the call it made.
    output_type = f"{item['type']}_output"
    [assistant, tool] = to_messages(
        [rendered, {"type": output_type, "call_id": call.id, "output": "ok"}]
    )
    [sent] = assistant["tool_calls"]
    assert sent["id"] == call.id
    assert sent["function"]["name"] == call.name
    if item["type"] == "custom_tool_call":
        assert json.loads(sent["function"]["arguments"]) == {"input": item["input"]}
    else:
        assert sent["function"]["arguments"] == call.arguments
    assert tool == {"role": "tool", "tool_call_id": call.id, "content": "ok"}
    response = ResponseShape(parse(input="hi")).response("completed", [rendered], {})
    assert_valid_response(response)


def test_a_streamed_custom_call_is_its_input_events() -> None:
    asked = parse(input="hi", tools=[{"type": "custom", "name": "note"}], stream=True)
    writer = ResponseEvents(ResponseShape(asked))
    events = [
        *writer.open(),
        *writer.hand_back([ToolCall("c", "note", json.dumps({"input": "x\ny"}))]),
    ]
    events += writer.close(writer.last({}))
    parsed = [json.loads(e.split(b"data: ", 1)[1]) for e in events]
    kinds = [e["type"] for e in parsed]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
        "response.output_item.done",
        "response.completed",
    ]
    added, delta, done, item_done = parsed[2:6]
    assert added["item"]["input"] == ""
    assert added["item"]["type"] == "custom_tool_call"
    assert delta["delta"] == done["input"] == "x\ny"
    assert delta["item_id"] == done["item_id"] == added["item"]["id"] == item_done["item"]["id"]
    assert item_done["item"]["input"] == "x\ny"
    assert parsed[-1]["response"]["output"] == [item_done["item"]]
    assert parsed[-1]["response"]["tools"] == [{"type": "custom", "name": "note"}]
    assert_valid_response(parsed[-1]["response"])


def test_the_response_lists_the_clients_custom_and_namespace_tools() -> None:
    tools = [
        {"type": "custom", "name": "c", "format": _GRAMMAR, "description": "d"},
        {"type": "namespace", "name": "fs", "tools": [{"type": "function", "name": "read"}]},
        {"type": "web_search"},
    ]
    response = ResponseShape(parse(input="hi", tools=tools)).response("completed", [], {})
    assert response["tools"] == [
        {"type": "custom", "name": "c", "format": _GRAMMAR, "description": "d"},
        {
            "type": "namespace",
            "name": "fs",
            "description": "",
            "tools": [{"type": "function", "name": "read", "parameters": None, "strict": None}],
        },
    ]
    assert_valid_response(response)


_KIND = st.sampled_from(["function", "custom"])
_NAME = st.text("abc_-é\n", min_size=1, max_size=4)
_MEMBER = st.fixed_dictionaries(
    {
        "type": st.one_of(_KIND, _KIND, _KIND, st.sampled_from(["web_search", "x"]), _JSON),
        "name": st.one_of(_NAME, _NAME, _NAME, _JSON),
    },
    optional={
        "description": st.text(max_size=4) | _JSON,
        "format": st.sampled_from([{"type": "text"}, _GRAMMAR, {"type": "grammar"}]) | _JSON,
        "parameters": st.just({"type": "object"}) | _JSON,
    },
)
_TOOL = st.one_of(
    _MEMBER,
    st.fixed_dictionaries(
        {
            "type": st.just("namespace"),
            "name": st.one_of(_NAME, _NAME, _JSON),
            "tools": st.one_of(st.lists(_MEMBER, max_size=3), st.lists(_MEMBER, max_size=3), _JSON),
        },
        optional={"description": st.text(max_size=4) | _JSON},
    ),
)


@given(st.lists(_TOOL, max_size=5), st.text(max_size=8))
def test_any_tools_are_a_400_or_offered_so_each_call_goes_back_valid_and_returns_as_made(
    tools: list[dict[str, Any]], text: str
) -> None:
    try:
        asked = parse(input="hi", tools=tools)
    except BadRequest:
        return
    names = asked.client_names
    offered = [tool.name for tool in asked.client_tools]
    calls = [
        ToolCall(f"c{i}", name, json.dumps({"input": text}) if name in names else "{}")
        for i, name in enumerate(offered)
    ]
    output = output_of(AssistantMessage(None), calls, names)
    assert_valid_response(ResponseShape(asked).response("completed", output, {}))
    if not calls:
        return
    [assistant] = to_messages(output)
    made = [(c["id"], c["function"]["name"]) for c in assistant["tool_calls"]]
    assert made == [(call.id, call.name) for call in calls]
    for item in output:
        if item["type"] == "custom_tool_call":
            assert item["input"] == text
