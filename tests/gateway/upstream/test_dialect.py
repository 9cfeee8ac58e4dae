"""The upstream dialect and the chat surface's rendering, from tables."""

from __future__ import annotations

from typing import Any

import pytest

from gateway import chat_json
from gateway.chat_json import decode_tool_choice, encode_tool_choice
from gateway.errors import UpstreamError
from gateway.upstream import rounds
from gateway.upstream.openai import codec as dialect
from gateway.values import AssistantMessage, Completion, ToolCall, ToolOutput


def test_a_turn_goes_back_with_only_portable_fields() -> None:
    message = {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "reasoning_content": "thinking...",
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": ""}}],
    }
    assert chat_json.turn_message(dialect.parse_turn(message)) == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }


@pytest.mark.parametrize("calls", ["oops", [1], [{"function": "f"}], [None]])
def test_malformed_tool_calls_are_the_upstreams_fault(calls: Any) -> None:
    with pytest.raises(UpstreamError):
        dialect.parse_turn({"tool_calls": calls})


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (
            {"id": "c", "function": {"name": "f", "arguments": {"x": 1}}},
            ToolCall("c", "f", '{"x":1}'),  # an object becomes its compact JSON text
        ),
        ({"id": "c", "function": {"name": 7, "arguments": 3}}, ToolCall("c", None, "")),
        (
            {"id": "c", "type": "custom", "custom": {"name": "g", "input": "raw text"}},
            ToolCall("c", "g", "raw text", "custom"),
        ),
    ],
)
def test_calls_parse_into_values(call: dict[str, Any], expected: ToolCall) -> None:
    assert dialect.parse_call(call) == expected


def test_a_call_without_an_id_gets_one() -> None:
    first = dialect.parse_call({"function": {"name": "f"}})
    second = dialect.parse_call({"id": "", "function": {"name": "f"}})
    assert first.id.startswith("call_")
    assert second.id.startswith("call_")
    assert first.id != second.id


def test_values_render_back_as_they_parsed() -> None:
    calls = [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}},
        {"id": "b", "type": "custom", "custom": {"name": "g", "input": "hello"}},
    ]
    turn = dialect.parse_turn({"role": "assistant", "content": "so", "tool_calls": calls})
    assert [chat_json.call_dict(call) for call in turn.calls] == calls
    history = chat_json.messages([turn, ToolOutput("a", "2")])
    assert history == [
        {"role": "assistant", "content": "so", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "a", "content": "2"},
    ]


def test_a_completion_is_a_round_that_keeps_the_raw_answer() -> None:
    response = {
        "choices": [{"message": {"content": "hi", "refusal": None}, "finish_reason": "length"}],
        "usage": {"total_tokens": 2},
        "system_fingerprint": "fp",
    }
    answer = dialect.parse_completion(response)
    assert answer == Completion(AssistantMessage("hi"), {"total_tokens": 2}, "length")
    assert answer.raw is response
    with pytest.raises(UpstreamError, match="without a message"):
        dialect.parse_completion({"choices": [{"text": "hi"}]})


@pytest.mark.parametrize(
    ("choice", "first", "final", "client", "expected"),
    [
        ("required", True, False, frozenset(), "required"),
        ("required", False, False, frozenset(), "auto"),
        ("required", False, False, frozenset({"c"}), "required"),
        ("required", False, True, frozenset({"c"}), "none"),
        (None, False, False, frozenset(), None),
        ("none", False, False, frozenset(), "none"),
        ({"type": "function", "function": {"name": "s"}}, True, False, frozenset(), "first"),
        ({"type": "function", "function": {"name": "s"}}, False, False, frozenset(), "auto"),
        ({"type": "function", "function": {"name": "c"}}, False, False, frozenset({"c"}), "same"),
        ({"type": "custom", "custom": {"name": "c"}}, False, False, frozenset({"c"}), "same"),
        ({"type": "allowed_tools"}, False, False, frozenset({"c"}), "auto"),
    ],
)
def test_round_tool_choice(
    choice: Any, first: bool, final: bool, client: frozenset[str], expected: Any
) -> None:
    if expected in ("first", "same"):
        expected = choice
    # The client's choice as a value, and the round's as the dialect writes it.
    decided = rounds.round_tool_choice(
        decode_tool_choice(choice) if choice is not None else None, first, final, client
    )
    assert (encode_tool_choice(decided) if decided is not None else None) == expected


def test_round_body_keeps_the_clients_parameters() -> None:
    params = {"model": "client", "temperature": 0.2, "stream_options": {"x": 1}, "messages": []}
    history = [{"role": "user", "content": "hi"}]
    body = dialect.round_body(params, "target", history, [], False, None)
    assert body == {
        "model": "target",
        "temperature": 0.2,
        "messages": history,
        "stream": False,
    }  # no tools: none listed, and no tool_choice (servers refuse an empty list)
    tools = [{"type": "function", "function": {"name": "f"}}]
    streamed = dialect.round_body(params, "target", history, tools, True, "none")
    assert streamed["stream_options"] == {"include_usage": True}
    assert streamed["tool_choice"] == "none"
    assert "tool_choice" not in dialect.round_body(params, "target", history, [], True, "none")
    assert params["model"] == "client"  # the job's parameters are never changed
