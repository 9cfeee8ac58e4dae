"""The ``anthropic`` dialect's codec from tables, and its stream reader against hostile
events: every request it writes validates against the ``anthropic`` SDK's request types,
and nothing a server streams raises anything but ``UpstreamError``."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from types import MappingProxyType
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config import UpstreamConfig
from gateway.errors import BadRequest, UpstreamError
from gateway.upstream.anthropic.codec import (
    BLOCKS,
    StreamAssembler,
    declare,
    parameters,
    parse_message,
    tool_choice,
    usage_of,
)
from gateway.upstream.anthropic.model import MessagesModel
from gateway.upstream.port import ModelAsk
from gateway.upstream.rounds import Declarations
from gateway.upstream.turns import hidden_turns, joined, system_and_turns
from gateway.values import (
    AssistantMessage,
    CompletionRequest,
    Message,
    Parameters,
    Part,
    ResponseFormat,
    ToolCall,
    ToolChoice,
    ToolDefinition,
    ToolOutput,
)
from tests.support.anthropic_upstream import message, request_errors, stream_of, text, tool_use

T = TypeVar("T")

PNG = "data:image/png;base64,iVBORw0KGgo="


def body(system: list[Any], turns: list[Any], **more: Any) -> dict[str, Any]:
    sent = {"model": "claude-test", "max_tokens": 64, "messages": turns, **more}
    if system:
        sent["system"] = system
    return sent


def test_a_chat_history_becomes_alternating_turns_with_system_apart() -> None:
    history = [
        Message("system", "Be brief."),
        Message("developer", (Part("text", "Cite."),)),
        Message(
            "user", (Part("text", "look"), Part("image_url", None, {"image_url": {"url": PNG}}))
        ),
        Message("user", "and this", extra={"name": "ann"}),
        Message(
            "assistant",
            None,
            (ToolCall("c1", "f", '{"a": 1}'), ToolCall("c2", "g", "")),
            carried=(MappingProxyType({"type": "thinking", "thinking": "t", "signature": "s"}),),
        ),
        Message("tool", "one", call_id="c1"),
        Message("tool", "two", call_id="c2", extra={"is_error": True}),
        Message("user", "thanks"),
    ]
    system, turns = system_and_turns(history, BLOCKS)
    assert system == [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Cite."}]
    assert [turn["role"] for turn in turns] == ["user", "assistant", "user"]
    assert turns[0]["content"][1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
    }
    assert turns[1]["content"] == [
        {"type": "thinking", "thinking": "t", "signature": "s"},
        {"type": "tool_use", "id": "c1", "name": "f", "input": {"a": 1}},
        {"type": "tool_use", "id": "c2", "name": "g", "input": {}},
    ]
    assert turns[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": "one"},
        {"type": "tool_result", "tool_use_id": "c2", "content": "two", "is_error": True},
        {"type": "text", "text": "thanks"},
    ]
    assert request_errors(body(system, turns)) == []


def test_hidden_rounds_join_the_visible_turns_where_roles_meet() -> None:
    turn = AssistantMessage("let me", (ToolCall("c1", "f", "{}"),))
    hidden = hidden_turns([turn, ToolOutput("c1", "failed", error=True)], BLOCKS)
    visible = [{"role": "user", "content": [{"type": "text", "text": "go"}]}]
    whole = joined(visible, hidden)
    assert [t["role"] for t in whole] == ["user", "assistant", "user"]
    assert whole[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": "failed", "is_error": True}
    ]
    prefilled = [*visible, {"role": "assistant", "content": [{"type": "text", "text": "So"}]}]
    assert len(joined(prefilled, hidden)) == 3  # the prefill and the turn are one turn
    assert request_errors(body([], whole)) == []


def test_malformed_arguments_go_back_as_the_model_wrote_them() -> None:
    [turn] = hidden_turns([AssistantMessage(None, (ToolCall("c", "f", "{oops"),))], BLOCKS)
    assert turn["content"][0]["input"] == {"arguments": "{oops"}


@pytest.mark.parametrize(
    "part",
    [
        Part("input_audio", None, {"input_audio": {"data": "x", "format": "wav"}}),
        Part("file", None, {"file": {"file_id": "file-1"}}),
        Part("image_url", None, {"image_url": {"url": "ftp://x/y.png"}}),
        Part("image_url", None, {"image_url": {"url": "data:image/png,raw"}}),
    ],
)
def test_content_messages_cannot_carry_is_the_clients_400(part: Part) -> None:
    with pytest.raises(BadRequest) as caught:
        system_and_turns([Message("user", (part,))], BLOCKS)
    assert caught.value.status == 400


def test_tools_and_choices() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    tool = ToolDefinition("find", "Finds.", schema, extra={"strict": True})
    custom = ToolDefinition("patch", "Patches.", None, "custom")
    declared = [declare(tool), declare(custom)]
    assert declared[0] == {
        "name": "find",
        "input_schema": schema,
        "description": "Finds.",
        "strict": True,
    }
    assert declared[1]["input_schema"]["required"] == ["input"]
    assert tool_choice(ToolChoice("required"), None) == {"type": "any"}
    assert tool_choice(ToolChoice("required", "find"), False) == {
        "type": "tool",
        "name": "find",
        "disable_parallel_tool_use": True,
    }
    assert tool_choice(ToolChoice("none"), False) == {"type": "none"}
    assert tool_choice(None, False) == {"type": "auto", "disable_parallel_tool_use": True}
    assert tool_choice(None, None) is None
    assert tool_choice(ToolChoice(unread={"type": "weird"}), None) == {"type": "auto"}
    sent = body([], [{"role": "user", "content": "x"}], tools=declared)
    sent["tool_choice"] = tool_choice(ToolChoice("required"), False)
    assert request_errors(sent) == []


def test_parameters_translate_what_messages_reads_and_leave_out_the_rest() -> None:
    params = Parameters(
        temperature=0.2,
        top_p=0.9,
        user="u",
        reasoning_effort="minimal",
        response_format=ResponseFormat("json_schema", "x", None, {"type": "object"}),
        extra={"stop": "END", "seed": 1, "thinking": {"type": "adaptive"}, "logprobs": True},
    )
    encoded = parameters(params)
    assert encoded == {
        "stop_sequences": ["END"],
        "metadata": {"user_id": "u"},
        "output_config": {
            "format": {"type": "json_schema", "schema": {"type": "object"}},
            "effort": "low",
        },
        "thinking": {"type": "adaptive"},
    }
    assert request_errors(body([], [{"role": "user", "content": "x"}], **encoded)) == []
    # An upstream that takes sampling parameters (``sampling: true``: llama.cpp, vLLM)
    # gets the client's; Anthropic's own API, the default, none (issue 62 §8).
    sampled = parameters(params, sampling=True)
    assert (sampled["temperature"], sampled["top_p"]) == (0.2, 0.9)
    assert {k: v for k, v in sampled.items() if k not in ("temperature", "top_p")} == encoded
    assert "temperature" not in parameters(Parameters(top_p=0.5), sampling=True)


def test_a_whole_answer_as_a_round() -> None:
    answer = message(
        [
            {"type": "thinking", "thinking": "hm", "signature": "s"},
            text("a"),
            text("b"),
            tool_use("f", {"x": [1]}),
        ]
    )
    round_ = parse_message(answer)
    assert round_.turn.content == "ab"
    assert round_.turn.calls == (ToolCall("toolu_1", "f", '{"x":[1]}'),)
    assert [dict(b) for b in round_.turn.carried] == [
        {"type": "thinking", "thinking": "hm", "signature": "s"}
    ]
    assert round_.finish_reason == "tool_calls"
    assert round_.usage == {
        "prompt_tokens": 19,
        "completion_tokens": 7,
        "total_tokens": 26,
        "prompt_tokens_details": {"cached_tokens": 3, "cache_write_tokens": 5},
    }
    refused = parse_message({**message([text("no")]), "stop_reason": "refusal"})
    assert (refused.turn.content, refused.turn.refusal, refused.finish_reason) == (
        None,
        "no",
        "content_filter",
    )
    for reason, finish in [
        ("max_tokens", "length"),
        ("pause_turn", "stop"),
        ("new_reason", "stop"),
    ]:
        assert (
            parse_message({**message([text("x")]), "stop_reason": reason}).finish_reason == finish
        )


def test_lying_usage_is_left_out() -> None:
    lying = usage_of({"input_tokens": -5, "output_tokens": "many"}, "up") or {}
    assert "prompt_tokens" not in lying
    assert "completion_tokens" not in lying
    counted = usage_of({"input_tokens": 10**15, "output_tokens": 3}, "up")
    assert counted is not None
    assert "prompt_tokens" not in counted
    assert usage_of("lots", "up") is None


def _events(answer: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for chunk in stream_of(answer):
        data = chunk.decode().split("data: ", 1)[1]
        found.append(json.loads(data))
    return found


def test_a_stream_assembles_into_the_same_round_as_the_whole_answer() -> None:
    answer = message(
        [
            {"type": "thinking", "thinking": "hm", "signature": "s"},
            text("hello"),
            tool_use("f", {"x": 1}),
        ]
    )
    assembler = StreamAssembler("up")
    shown = [d.delta["content"] for event in _events(answer) for d in assembler.add(event)]
    assert "".join(shown) == "hello"  # never the thinking
    streamed, whole = assembler.round(), parse_message(answer)
    assert streamed.turn.content == whole.turn.content
    assert [dict(b) for b in streamed.turn.carried] == [dict(b) for b in whole.turn.carried]
    assert streamed.turn.calls[0].name == "f"
    assert streamed.finish_reason == "tool_calls"


def test_a_stream_that_stops_early_or_fails_is_the_upstreams_fault() -> None:
    events = _events(message([text("hi")]))
    early = StreamAssembler("up")
    for event in events[:-1]:
        early.add(event)
    with pytest.raises(UpstreamError, match="ended the stream early"):
        early.round()
    failing = StreamAssembler("up")
    with pytest.raises(UpstreamError, match="Overloaded"):
        failing.add(
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        )
    unknown = StreamAssembler("up")
    for event in [*events[:2], {"type": "brand_new_event", "x": 1}, *events[2:]]:
        unknown.add(event)
    assert unknown.round().turn.content == "hi"


def test_arguments_that_never_close_reach_the_runner_as_written() -> None:
    assembler = StreamAssembler("up")
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"id": "m", "model": "c", "usage": {}}},
        {"type": "content_block_start", "index": 0, "content_block": tool_use("f", {})},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '{"a": [1, 2'},
        },
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}},
        {"type": "message_stop"},
    ]
    for event in events:
        assembler.add(event)
    [call] = assembler.round().turn.calls
    assert call.arguments == '{"a": [1, 2'


def _nested(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Lists and objects of ``inner`` (a named function: hypothesis reads its source)."""
    return st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8), _nested, max_leaves=8
)
_event = st.fixed_dictionaries(
    {
        "type": st.sampled_from(
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
                "ping",
                "error",
                "other",
            ]
        )
    },
    optional={
        "index": st.integers(-2, 3) | _json,
        "delta": _json
        | st.fixed_dictionaries(
            {
                "type": st.sampled_from(
                    ["text_delta", "input_json_delta", "thinking_delta", "signature_delta"]
                )
            },
            optional={"text": _json, "partial_json": _json, "thinking": _json, "signature": _json},
        ),
        "content_block": _json
        | st.fixed_dictionaries(
            {"type": st.sampled_from(["text", "tool_use", "thinking", "redacted_thinking"])},
            optional={"id": _json, "name": _json, "input": _json, "text": _json},
        ),
        "message": _json,
        "usage": _json,
        "error": _json,
    },
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_event, max_size=12))
def test_no_stream_raises_anything_but_the_upstreams_fault(events: list[dict[str, Any]]) -> None:
    assembler = StreamAssembler("up")
    try:
        for event in events:
            assembler.add(event)
        assembler.round()
    except UpstreamError:
        pass


@settings(max_examples=200, deadline=None)
@given(_json)
def test_no_whole_answer_raises_anything_but_the_upstreams_fault(answer: Any) -> None:
    with contextlib.suppress(UpstreamError):
        parse_message(
            answer if not isinstance(answer, dict) else {**answer, "content": answer.get("content")}
        )


class _Recording:
    """A Messages client that records the bodies it is given and answers plainly."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def message(
        self, upstream: Any, body: dict[str, Any], read: Callable[[Any], T], trace: Any = None
    ) -> T:
        self.bodies.append(body)
        return read(message([text("ok")]))

    def message_stream(self, upstream: Any, body: dict[str, Any], trace: Any = None) -> Any:
        raise AssertionError("not streamed here")


@pytest.mark.anyio
async def test_the_operator_marks_the_tools_and_system_prompt_for_the_prompt_cache() -> None:

    client = _Recording()
    upstream = UpstreamConfig(
        name="claude", base_url="https://api.anthropic.com", dialect="anthropic", cache_prompt=True
    )
    tool = ToolDefinition("find", "Finds.", {"type": "object", "properties": {}})
    history = [Message("system", "Be brief."), Message("user", "hi")]
    ask = ModelAsk(upstream, "claude-test", Parameters(), history, server_tools=(tool,))
    model = MessagesModel(client, ask, Declarations(declare))
    await model.answer(CompletionRequest([], first=True, final=False))
    [sent] = client.bodies
    assert sent["system"] == [
        {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}
    ]
    assert sent["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert request_errors(sent) == []
