"""The ``bedrock`` dialect's codec from tables, and its readers against hostile input:
every request it writes validates against botocore's service model, nothing a server
streams raises anything but ``UpstreamError``, and frames are cut without buffering
more than one frame may hold."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from types import MappingProxyType
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gateway.config import UpstreamConfig
from gateway.errors import BadRequest, UpstreamError
from gateway.upstream.bedrock.client import MAX_FRAME_BYTES, Frames, model_path, region_of
from gateway.upstream.bedrock.codec import (
    BLOCKS,
    StreamAssembler,
    declare,
    parameters,
    parse_answer,
    tool_choice,
)
from gateway.upstream.bedrock.model import ConverseModel
from gateway.upstream.port import ModelAsk
from gateway.upstream.rounds import Declarations
from gateway.upstream.servers import ModelServers
from gateway.upstream.turns import hidden_turns, joined, system_and_turns
from gateway.upstream.wire import upstream_wire
from gateway.values import (
    AssistantMessage,
    CompletionRequest,
    Message,
    Parameters,
    Part,
    ToolCall,
    ToolChoice,
    ToolDefinition,
    ToolOutput,
)
from tests.support.bedrock_upstream import answer_of, body_errors, event, reasoning, stream_of, text
from tests.support.recorder import Answer, Recorder
from tests.support.scripted import Harness

T = TypeVar("T")

PNG = "data:image/png;base64,iVBORw0KGgo="


def test_a_history_as_converse_reads_it() -> None:
    history = [
        Message("system", "Be brief."),
        Message(
            "user", (Part("text", "look"), Part("image_url", None, {"image_url": {"url": PNG}}))
        ),
        Message(
            "assistant",
            None,
            (ToolCall("c1", "f", '{"a": 1}'),),
            carried=(MappingProxyType(reasoning("t")),),
        ),
        Message("tool", "", call_id="c1", extra={"is_error": True}),
    ]
    system, turns = system_and_turns(history, BLOCKS)
    hidden = hidden_turns(
        [AssistantMessage("next", (ToolCall("c2", "g", ""),)), ToolOutput("c2", "ok")], BLOCKS
    )
    whole = joined(turns, hidden)
    assert system == [{"text": "Be brief."}]
    assert whole[0]["content"][1] == {
        "image": {"format": "png", "source": {"bytes": "iVBORw0KGgo="}}
    }
    assert whole[1]["content"][0] == reasoning("t")
    assert whole[2]["content"][0] == {
        "toolResult": {"toolUseId": "c1", "content": [{"text": " "}], "status": "error"}
    }
    assert [t["role"] for t in whole] == ["user", "assistant", "user", "assistant", "user"]
    tools: dict[str, Any] = {
        "tools": [declare(ToolDefinition("f", "F.", {"type": "object", "properties": {}}))]
    }
    tools["toolChoice"] = tool_choice(ToolChoice("required", "f"))
    body = {
        "messages": whole,
        "system": system,
        "toolConfig": tools,
        **parameters(Parameters(temperature=0.1, extra={"stop": "END", "seed": 3}), 100),
    }
    assert body["inferenceConfig"] == {
        "temperature": 0.1,
        "stopSequences": ["END"],
        "maxTokens": 100,
    }
    assert body_errors("Converse", "m", body) == []


@pytest.mark.parametrize(
    ("choice", "encoded"),
    [
        (ToolChoice("auto"), {"auto": {}}),
        (ToolChoice("required"), {"any": {}}),
        (ToolChoice("required", "f"), {"tool": {"name": "f"}}),
        (ToolChoice("none"), None),  # Converse has no "none"
        (None, None),
    ],
)
def test_tool_choices(choice: ToolChoice | None, encoded: dict[str, Any] | None) -> None:
    assert tool_choice(choice) == encoded


def test_content_converse_cannot_carry_is_the_clients_400() -> None:
    for part in (
        Part("image_url", None, {"image_url": {"url": "https://example.com/a.png"}}),
        Part("input_audio", None, {"input_audio": {}}),
        Part("image_url", None, {"image_url": {"url": "data:image/tiff;base64,AA=="}}),
    ):
        with pytest.raises(BadRequest):
            system_and_turns([Message("user", (part,))], BLOCKS)


def test_a_whole_answer_and_a_stream_make_the_same_round() -> None:
    answer = answer_of(
        [
            reasoning("hm"),
            text("hello"),
            {"toolUse": {"toolUseId": "t", "name": "f", "input": {"x": 1}}},
        ]
    )
    whole = parse_answer(answer)
    assembler = StreamAssembler("up")
    shown = []
    for raw in stream_of(answer):
        [(kind, payload)] = Frames().feed(raw)
        shown += [d.delta["content"] for d in assembler.add(kind, payload)]
    streamed = assembler.round()
    assert "".join(shown) == "hello" == whole.turn.content == streamed.turn.content
    assert [dict(b) for b in streamed.turn.carried] == [dict(b) for b in whole.turn.carried]
    assert json.loads(streamed.turn.calls[0].arguments) == {"x": 1}
    assert whole.finish_reason == streamed.finish_reason == "tool_calls"
    assert whole.usage is not None
    assert whole.usage["prompt_tokens"] == 19


def test_frames_arrive_in_any_pieces_and_a_huge_one_is_refused_before_it_is_buffered() -> None:
    raw = b"".join(stream_of(answer_of([text("hello there")])))
    frames = Frames()
    events = [e for i in range(0, len(raw), 7) for e in frames.feed(raw[i : i + 7])]
    assert next(kind for kind, _ in events) == "messageStart"
    assert frames.pending == 0
    with pytest.raises(UpstreamError, match="no size"):
        Frames().feed((MAX_FRAME_BYTES + 1).to_bytes(4, "big") + b"\x00" * 8)


def test_paths_and_regions() -> None:
    assert model_path("arn:aws:bedrock:us-east-1:1:x/y", False) == (
        "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ax%2Fy/converse"
    )
    named = UpstreamConfig(
        name="b", base_url="https://bedrock-runtime.eu-west-3.amazonaws.com", dialect="bedrock"
    )
    assert region_of(named) == "eu-west-3"
    with pytest.raises(ValidationError, match="region"):  # refused as the file is read
        UpstreamConfig(name="b", base_url="http://127.0.0.1:1", dialect="bedrock")


def _nested(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Lists and objects of ``inner`` (a named function: hypothesis reads its source)."""
    return st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6), _nested, max_leaves=8
)
_kinds = st.sampled_from(
    [
        "messageStart",
        "contentBlockStart",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
        "throttlingException",
        "other",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            _kinds,
            st.dictionaries(
                st.sampled_from(
                    ["contentBlockIndex", "delta", "start", "stopReason", "usage", "message"]
                ),
                _json,
                max_size=4,
            ),
        ),
        max_size=10,
    )
)
def test_no_stream_raises_anything_but_the_upstreams_fault(
    events: list[tuple[str, dict[str, Any]]],
) -> None:
    assembler = StreamAssembler("up")
    try:
        for kind, payload in events:
            assembler.add(kind, payload)
        assembler.round()
    except UpstreamError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_no_bytes_raise_anything_but_the_upstreams_fault(data: bytes) -> None:
    frames = Frames()
    try:
        frames.feed(data)
        frames.feed(event("messageStop", {"stopReason": "end_turn"}))
    except UpstreamError:
        pass


@settings(max_examples=200, deadline=None)
@given(_json)
def test_no_whole_answer_raises_anything_but_the_upstreams_fault(answer: Any) -> None:
    with contextlib.suppress(UpstreamError):
        parse_answer({"output": {"message": {"content": answer}}, "usage": answer})


def test_the_operator_adds_cache_points_after_the_tools_and_system_prompt() -> None:

    bodies: list[dict[str, Any]] = []

    class Recording:
        async def converse(
            self,
            upstream: Any,
            model: str,
            body: dict[str, Any],
            read: Callable[[Any], T],
            trace: Any = None,
        ) -> T:
            bodies.append(body)
            return read(answer_of([text("ok")]))

        def converse_stream(self, *given: Any) -> Any:
            raise AssertionError("not streamed here")

    upstream = UpstreamConfig(
        name="b",
        base_url="http://127.0.0.1:1",
        dialect="bedrock",
        region="us-east-1",
        cache_prompt=True,
    )
    tool = ToolDefinition("find", "Finds.", {"type": "object", "properties": {}})
    history = [Message("system", "Be brief."), Message("user", "hi")]
    ask = ModelAsk(upstream, "m", Parameters(), history, server_tools=(tool,))
    model = ConverseModel(Recording(), ask, Declarations(declare))
    asyncio.run(model.answer(CompletionRequest([], first=True, final=False)))
    [sent] = bodies
    assert sent["system"][-1] == {"cachePoint": {"type": "default"}}
    assert sent["toolConfig"]["tools"][-1] == {"cachePoint": {"type": "default"}}
    assert body_errors("Converse", "m", sent) == []


def test_the_probe_is_signed_so_that_refused_credentials_show(
    monkeypatch: pytest.MonkeyPatch, harness: Harness
) -> None:
    """``toolgate check --probe`` asks a Bedrock endpoint ``GET /`` signed as every
    request is: an unsigned one would be refused whatever the credentials."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDPROBE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "probe-secret")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    endpoint = Recorder(lambda hit: Answer(404, b'{"message": "UnknownOperationException"}'))
    url = harness.serve(endpoint).url
    upstream = UpstreamConfig(name="b", base_url=url, dialect="bedrock", region="us-west-2")

    async def probe() -> int:
        wire = upstream_wire()
        try:
            status, _ = await ModelServers(wire).probe(upstream, 5.0)
        finally:
            await wire.aclose()
        return status

    assert asyncio.run(probe()) == 404
    [hit] = endpoint.hits
    assert (hit.method, hit.raw_path) == ("GET", "/")
    signed = hit.headers["authorization"]
    assert signed.startswith("AWS4-HMAC-SHA256 Credential=AKIDPROBE/")
    assert "/us-west-2/bedrock/aws4_request" in signed


@pytest.mark.parametrize(
    ("extra", "said"),
    [({"stop_sequence": "END"}, "END"), (None, ""), ({"other": 1}, "")],
)
def test_a_stop_sequence_is_said_whole_or_streamed(extra: Any, said: str) -> None:
    """Claude on Bedrock names the sequence in its own fields; Converse alone says only
    that it was one (``""``). Issue 62 §7."""
    answer: dict[str, Any] = {
        "output": {"message": {"role": "assistant", "content": [{"text": "one two"}]}},
        "stopReason": "stop_sequence",
    }
    stop: dict[str, Any] = {"stopReason": "stop_sequence"}
    if extra is not None:
        answer["additionalModelResponseFields"] = extra
        stop["additionalModelResponseFields"] = extra
    assert parse_answer(answer).stop_sequence == said
    streamed = StreamAssembler()
    streamed.add("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "one two"}})
    streamed.add("messageStop", stop)
    streamed.add("metadata", {"usage": {"inputTokens": 1, "outputTokens": 2}})
    assert streamed.round().stop_sequence == said
    ended = {**answer, "stopReason": "end_turn"}
    assert parse_answer(ended).stop_sequence is None
