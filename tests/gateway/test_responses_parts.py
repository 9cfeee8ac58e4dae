"""The Responses surface's pure parts: reading requests, items into messages, the
response and its events — from tables, and fuzzed: whatever a client sends is a
request the loop can run or a 400, and what the gateway renders is valid."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import BadRequest, UpstreamError
from gateway.surfaces.responses.items import stored_items, to_messages, usage_of
from gateway.surfaces.responses.render import ResponseEvents, ResponseShape, output_of
from gateway.surfaces.responses.request import parse_responses_request
from gateway.values import Piece, ToolCall, Turn
from tests.support.schema import assert_valid_response


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
    assert asked.params == {
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
    assert asked.client_tools == [
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
        *writer.piece(Piece({"content": "Hel"})),
        *writer.piece(Piece({"refusal": "no"})),
        *writer.piece(Piece({"content": "lo"})),
        *writer.hand_back([ToolCall("c1", "f", '{"a": 1}')]),
        *writer.close({"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}),
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
    turn = Turn("answer")
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
    flat = [tool["function"]["name"] for tool in asked.client_tools]
    assert flat[0] == "crm__find"
    assert flat[2] == "plain"
    assert len(flat[1]) == 64
    assert flat[1].startswith(long + "__")
    assert dict(asked.namespaces) == {"crm__find": ("crm", "find"), flat[1]: (long, "x" * 40)}
    assert asked.client_tool_names == frozenset(flat)
    again = parse_responses_request(raw, {})  # the same name every time
    assert [tool["function"]["name"] for tool in again.client_tools] == flat


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
