"""A chat history decoded into ``Message`` values and encoded back (docs/design.md §10):
typed where the gateway reads it, lossless for everything else, never raising on what
a client sends."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.chat_json import (
    decode_history,
    decode_message,
    decode_parameters,
    decode_tool,
    encode_message,
    encode_parameters,
    encode_tool,
)
from gateway.values import (
    NULL_CONTENT,
    AssistantMessage,
    Message,
    Part,
    ResponseFormat,
    ToolCall,
    ToolChoice,
    ToolDefinition,
    as_message,
)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)
CALL = st.fixed_dictionaries(
    {
        "id": st.text(max_size=4),
        "type": st.just("function"),
        "function": st.fixed_dictionaries(
            {"name": st.text(max_size=4), "arguments": st.text(max_size=6)}
        ),
    }
) | st.fixed_dictionaries(
    {
        "id": st.text(max_size=4),
        "type": st.just("custom"),
        "custom": st.fixed_dictionaries({"name": st.text(max_size=4), "input": st.text()}),
    }
)
PART = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "image_url", "input_audio"])},
    optional={"text": JSON, "image_url": JSON, "cache_control": JSON},
)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool", "system", "developer"])},
    optional={
        "content": st.text() | st.lists(PART, max_size=3) | JSON,
        "tool_calls": st.lists(CALL, max_size=3) | JSON,
        "tool_call_id": st.text(max_size=4) | JSON,
        "name": JSON,
        "audio": JSON,
    },
)


def as_sent(raw: dict[str, Any]) -> dict[str, Any]:
    """A message as the model server is sent it: as it came, but a function call's
    empty arguments are ``{}`` (as the gateway writes its own calls)."""
    calls = raw.get("tool_calls")
    if not isinstance(calls, list) or not decode_message(raw).calls:
        return raw
    written = []
    for call in calls:
        function = call.get("function")
        if function is not None and function["arguments"] == "":
            call = {**call, "function": {**function, "arguments": "{}"}}
        written.append(call)
    return {**raw, "tool_calls": written}


@settings(max_examples=400, deadline=None)
@given(MESSAGE)
def test_a_message_goes_back_as_it_came(raw: dict[str, Any]) -> None:
    message = decode_message(raw)
    assert encode_message(message) == as_sent(raw)
    # What the gateway reads is typed, whatever the client sent.
    assert isinstance(message.text, str)
    assert all(
        isinstance(call.id, str) and isinstance(call.arguments, str) for call in message.calls
    )
    assert message.call_id is None or isinstance(message.call_id, str)


@settings(max_examples=300, deadline=None)
@given(st.lists(MESSAGE | st.dictionaries(st.text(max_size=8), JSON, max_size=3) | JSON))
def test_a_history_decodes_in_one_pass_as_each_message_does(raw: list[Any]) -> None:
    """A history is the values of its messages, or the index of the first that is not
    an object with a string role."""
    bad = next(
        (i for i, m in enumerate(raw) if not isinstance(m, dict) or type(m.get("role")) is not str),
        None,
    )
    decoded = decode_history(raw)
    if bad is not None:
        assert decoded == bad
    else:
        assert decoded == tuple(decode_message(message) for message in raw)
        assert [encode_message(message) for message in decoded] == [as_sent(m) for m in raw]


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=8), JSON, max_size=5))
def test_any_object_decodes(raw: dict[str, Any]) -> None:
    message = decode_message(raw)
    assert isinstance(message.role, str)
    assert isinstance(message.text, str)


def test_what_is_read_is_typed_and_the_rest_is_kept() -> None:
    raw = {
        "role": "user",
        "name": "ann",
        "content": [
            {"type": "text", "text": "look at "},
            {"type": "image_url", "image_url": {"url": "https://x/i.png", "detail": "low"}},
            {"type": "text", "text": "this"},
        ],
    }
    message = decode_message(raw)
    assert message.role == "user"
    assert message.text == "look at this"
    assert message.content == (
        Part("text", "look at "),
        Part("image_url", None, {"image_url": {"url": "https://x/i.png", "detail": "low"}}),
        Part("text", "this"),
    )
    assert message.extra == {"name": "ann"}
    # Tool calls that are not all calls are the model server's to judge, as they came.
    odd = {"role": "assistant", "content": None, "tool_calls": [{"id": 1}]}
    assert decode_message(odd).calls == ()
    assert encode_message(decode_message(odd)) == odd


def test_a_hidden_item_is_a_message_as_the_dialect_writes_it() -> None:
    turn = AssistantMessage(None, (ToolCall("c1", "f", "{}"),), refusal="no")
    assert as_message(turn) == Message("assistant", None, turn.calls, extra=NULL_CONTENT)
    assert encode_message(as_message(turn)) == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }


TOOL = st.fixed_dictionaries(
    {"type": st.sampled_from(["function", "custom", "web_search", "code_interpreter"])},
    optional={
        "function": st.fixed_dictionaries(
            {"name": st.text(max_size=4)},
            optional={"description": JSON, "parameters": JSON, "strict": JSON},
        )
        | JSON,
        "custom": st.fixed_dictionaries(
            {"name": st.text(max_size=4)}, optional={"description": JSON, "format": JSON}
        )
        | JSON,
        "cache_control": JSON,
    },
)


@settings(max_examples=400, deadline=None)
@given(TOOL)
def test_a_tool_goes_back_as_it_came(raw: dict[str, Any]) -> None:
    tool = decode_tool(raw)
    assert encode_tool(tool) == raw
    assert isinstance(tool.name, str)
    assert tool.description is None or isinstance(tool.description, str)
    assert tool.parameters is None or isinstance(tool.parameters, dict)


def test_a_server_tool_is_declared_as_a_function() -> None:
    tool = ToolDefinition("find", "Finds.", {"type": "object"})
    assert encode_tool(tool) == {
        "type": "function",
        "function": {"name": "find", "description": "Finds.", "parameters": {"type": "object"}},
    }
    assert decode_tool(encode_tool(tool)) == tool


CHOICE = (
    st.sampled_from(["auto", "none", "required", "any"])
    | st.fixed_dictionaries(
        {
            "type": st.sampled_from(["function", "custom"]),
            "function": st.fixed_dictionaries({"name": st.text(max_size=4)}),
        }
    )
    | st.fixed_dictionaries(
        {
            "type": st.just("allowed_tools"),
            "allowed_tools": st.fixed_dictionaries(
                {
                    "mode": st.sampled_from(["auto", "required", "x"]),
                    "tools": st.lists(
                        st.fixed_dictionaries(
                            {
                                "type": st.just("function"),
                                "function": st.fixed_dictionaries({"name": st.text(max_size=3)}),
                            }
                        ),
                        max_size=2,
                    ),
                }
            ),
        }
    )
    | JSON
)
SCHEMA_FIELDS = st.sampled_from(["name", "schema", "strict", "x"])
PARAMETERS = st.fixed_dictionaries(
    {},
    optional={
        "temperature": st.floats(0, 2) | JSON,
        "top_p": st.floats(0, 1) | JSON,
        "max_tokens": st.integers(-1, 10**6) | JSON,
        "max_completion_tokens": st.integers(-1, 10**6) | JSON,
        "tool_choice": CHOICE,
        "parallel_tool_calls": JSON,
        "response_format": st.fixed_dictionaries(
            {"type": st.sampled_from(["text", "json_object", "json_schema"])},
            optional={
                "json_schema": st.dictionaries(
                    st.sampled_from(["name", "schema", "strict", "x"]), JSON, max_size=3
                )
            },
        )
        | JSON,
        "reasoning_effort": JSON,
        "user": JSON,
        "seed": JSON,
        "stop": JSON,
        "model": st.text(max_size=3),
    },
)


@settings(max_examples=400, deadline=None)
@given(PARAMETERS)
def test_the_parameters_go_back_as_they_came(raw: dict[str, Any]) -> None:
    assert encode_parameters(decode_parameters(raw)) == raw


def test_what_the_gateway_reads_of_the_parameters_is_typed() -> None:
    body = {
        "model": "m",
        "messages": [],
        "max_completion_tokens": 64,
        "tool_choice": {"type": "function", "function": {"name": "find"}},
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}},
        "seed": 3,
    }
    parameters = decode_parameters(body)
    assert parameters.answer_bound == 64
    assert parameters.tool_choice == ToolChoice("required", "find")
    assert parameters.response_format == ResponseFormat("json_schema", "x", None, {})
    assert parameters.extra == {"model": "m", "seed": 3}
