"""The pure parts of streaming: the SSE parser, the round assembler, the chunk writer."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.errors import ToolLimitExceeded, UpstreamError
from gateway.surfaces.chat.chunks import ChunkWriter
from gateway.upstream.openai.codec import RoundAssembler
from gateway.upstream.sse import SSEParser
from gateway.values import AssistantMessage, Completion, ToolCall
from tests.support.schema import assert_valid, assert_valid_error

STREAM = (
    b": a comment\r\n"
    b'data: {"a": 1}\r\n\r\n'
    b"event: message\n"
    b"data: first line\n"
    b"data: second line\n"
    b"id: 7\n\n"
    b"data:no-space\r\r"
    b"data: \xc3\xbcnicode\n\n"
    b"data: [DONE]\n\n"
)
EVENTS = ['{"a": 1}', "first line\nsecond line", "no-space", "ünicode", "[DONE]"]


def test_parses_every_form() -> None:
    assert SSEParser().feed(STREAM) == EVENTS


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 64])
def test_any_chunking_gives_the_same_events(size: int) -> None:
    parser = SSEParser()
    events: list[str] = []
    for start in range(0, len(STREAM), size):
        events += parser.feed(STREAM[start : start + size])
    assert events + parser.close() == EVENTS


def test_every_split_point_gives_the_same_events() -> None:
    for cut in range(len(STREAM) + 1):
        parser = SSEParser()
        events = parser.feed(STREAM[:cut]) + parser.feed(STREAM[cut:]) + parser.close()
        assert events == EVENTS, cut


def test_an_unterminated_last_event_is_kept() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: x\n\ndata: tail") == ["x"]
    assert parser.close() == ["tail"]


def delta_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def test_the_assembler_forwards_text_and_collects_calls() -> None:
    assembler = RoundAssembler()
    forwarded = []
    for chunk in [
        delta_chunk({"role": "assistant", "content": ""}),
        delta_chunk({"content": "Checking "}),
        delta_chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "a",
                        "type": "function",
                        "function": {"name": "f", "arguments": ""},
                    }
                ]
            }
        ),
        delta_chunk({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "g"}}]}),
        delta_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"x":'}}]}),
        delta_chunk({"tool_calls": [{"index": 0, "function": {"arguments": " 1}"}}]}),
        delta_chunk({}, "tool_calls"),
        {"choices": [], "usage": {"total_tokens": 9}},
    ]:
        forwarded += [piece.delta for piece in assembler.add(chunk)]
    assert forwarded == [{"content": "Checking "}]
    calls = (ToolCall("a", "f", '{"x": 1}'), ToolCall("b", "g", ""))
    assert assembler.round() == Completion(
        AssistantMessage("Checking ", calls), {"total_tokens": 9}, "tool_calls"
    )


def test_the_assembler_turns_error_events_into_upstream_errors() -> None:
    with pytest.raises(UpstreamError, match="overloaded"):
        RoundAssembler().add({"error": {"message": "overloaded"}})


def test_chunk_writer_sends_one_role_and_valid_chunks() -> None:
    writer = ChunkWriter("chatcmpl-1", "client-model")
    raw = [
        writer.delta({"content": "a"}),
        writer.delta({"content": "b"}),
        writer.tool_calls([ToolCall("c", "f", "{}")]),
        writer.finish("tool_calls"),
        writer.usage({"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}),
    ]
    chunks = [json.loads(r.removeprefix(b"data: ")) for r in raw]
    for chunk in chunks:
        assert_valid(chunk, "CreateChatCompletionStreamResponse")
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert [d.get("role") for d in deltas] == ["assistant", None, None, None]
    assert {c["id"] for c in chunks} == {"chatcmpl-1"}
    event, data = writer.error(ToolLimitExceeded("x")).rstrip(b"\n").split(b"\n")
    assert event == b"event: error"  # LangChain4j raises on the name (docs/clients.md)
    error = json.loads(data.removeprefix(b"data: "))
    assert_valid_error(error)
