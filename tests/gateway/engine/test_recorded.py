"""A recording as a value and its document: what the gateway writes reads back as it
was; any document is read or refused saying why (it is hostile input: a file, an API
body), never anything else."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.engine.recorded import (
    Ending,
    LoopStart,
    RecordedCall,
    RecordedTool,
    Recording,
    RecordingUnreadable,
    decode,
    encode,
)
from gateway.values import (
    AnsweredRound,
    AssistantMessage,
    Completion,
    Message,
    Parameters,
    ToolCall,
    ToolDefinition,
    UsageCounts,
)

USAGE: UsageCounts = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
CALL = ToolCall("c1", "look", '{"q": "x"}')
RECORDING = Recording(
    LoopStart(
        Parameters(temperature=0.5, extra={"model": "m", "seed": 7}),
        (Message("system", "be brief"), Message("user", "look it up")),
        (ToolDefinition("mine", "The client's.", {"type": "object"}),),
    ),
    (
        RecordedTool(
            ToolDefinition("look", "Looks.", {"type": "object"}), "sha256:ab", "http", "read"
        ),
    ),
    (
        AnsweredRound(1, Completion(AssistantMessage(None, (CALL,)), USAGE, "tool_calls")),
        AnsweredRound(2, Completion(AssistantMessage("found it"), USAGE, "stop"), choice=1),
    ),
    (RecordedCall("c1", "look", {"q": "x"}, "ok", "x is 1"),),
    Ending("final", "found it", None, "stop"),
    "/v1/chat/completions",
    "m",
    "m-2025",
    {"model": "m", "messages": [{"role": "user", "content": "look it up"}]},
    200,
    None,
    USAGE,
)


def test_what_the_gateway_writes_reads_back_as_it_was() -> None:
    document = json.loads(json.dumps(encode(RECORDING)))
    assert decode(document) == RECORDING
    # The document a replay sends from: the chat-dialect request the loop began with.
    assert document["loop"]["params"]["messages"][1] == {"role": "user", "content": "look it up"}
    assert document["rounds"][0]["calls"] == [
        {"id": "c1", "name": "look", "arguments": '{"q": "x"}', "kind": "function"}
    ]
    assert document["tools"][0]["definition"]["function"]["name"] == "look"


def test_a_hand_made_recording_is_read_leniently() -> None:
    document = {
        "loop": {"params": {"model": "m", "messages": [{"role": "user", "content": "go"}]}},
        "rounds": [{"calls": [{"id": "c1", "name": "look", "arguments": {"q": "x"}}]}],
        "ended": {"kind": "hand_back", "calls": [{"id": "c2", "name": "mine"}]},
    }
    read = decode(document)
    assert read.calls() == [ToolCall("c1", "look", '{"q":"x"}')]
    assert read.rounds[0].round == 1
    assert read.ended == Ending("hand_back", calls=(ToolCall("c2", "mine", ""),))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=15,
)
LOOP = {"params": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}}


@settings(max_examples=300, deadline=None)
@given(
    st.fixed_dictionaries(
        {"loop": st.just(LOOP) | JSON},
        optional={
            part: JSON
            for part in ("tools", "rounds", "tool_calls", "ended", "usage", "model", "status")
        },
    )
)
def test_any_document_is_read_or_refused_saying_why(document: dict[str, Any]) -> None:
    try:
        read = decode(document)
    except RecordingUnreadable as exc:
        said = str(exc)
        read = None
    if read is None:
        assert said  # what keeps it from being replayed, for the client
        return
    assert decode(json.loads(json.dumps(encode(read)))) == read
