"""A recording is input the gateway did not make (a file, an API body): whatever its
shape, it is refused saying why (``RecordingUnreadable`` as it is read, a
``BadRequest`` when its tools cannot be used), or replayed; nothing else escapes, and
nothing reaches a tool."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config import GatewayConfig
from gateway.engine.recorded import RecordingUnreadable, decode
from gateway.errors import BadRequest
from gateway.runtime.replayer import Replayer
from gateway.runtime.trajectories import compare
from gateway.upstream.wire import HttpxWire
from tool_registry import EgressPolicy, create_tool_transport

CONFIG = GatewayConfig.model_validate(
    {
        "upstreams": [{"name": "u", "base_url": "http://u.test/v1", "max_retries": 0}],
        "models": [{"name": "m", "upstream": "u"}],
    }
)


def answer(request: httpx.Request) -> httpx.Response:
    message = {"role": "assistant", "content": "fine"}
    return httpx.Response(200, json={"choices": [{"index": 0, "message": message}]})


def no_tools(request: httpx.Request) -> httpx.Response:
    raise AssertionError(f"a tool was called: {request.url}")


def replayer() -> Replayer:
    tools = create_tool_transport(EgressPolicy(), inner=httpx.MockTransport(no_tools))
    return Replayer.of_config(CONFIG, HttpxWire(httpx.MockTransport(answer)), tools)


LOOP = {"params": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}}


@pytest.mark.parametrize(
    ("recording", "says"),
    [
        ({}, "no loop"),
        ({"loop": {"params": {}}}, "no messages"),
        ({"loop": {**LOOP, "client_tools": "x"}}, "client tools"),
        ({"loop": LOOP, "tools": [1]}, "tools are not a list"),
        ({"loop": LOOP, "tools": [{"definition": {}}]}, "no definition with a name"),
        (
            {"loop": LOOP, "tools": [{"definition": {"function": {"name": "t", "parameters": 3}}}]},
            "parameters",
        ),
        ({"loop": LOOP, "rounds": [{"calls": "x"}]}, "calls are not"),
        (
            {
                "loop": LOOP,
                "tools": [{"definition": {"function": {"name": "t", "parameters": {"type": 5}}}}],
            },
            "tools cannot be used",
        ),
    ],
)
@pytest.mark.anyio
async def test_a_malformed_recording_is_refused_saying_why(
    recording: dict[str, Any], says: str
) -> None:
    with pytest.raises((RecordingUnreadable, BadRequest), match=says):
        await replayer().replay(decode(recording), "m")


scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=10)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=20,
)
ids = st.sampled_from(["c1", "c2"]) | json_values
calls = st.fixed_dictionaries(
    {}, optional={"id": ids, "name": st.just("t") | json_values, "arguments": json_values}
)
rounds = st.lists(st.fixed_dictionaries({}, optional={"calls": st.lists(calls, max_size=3)}))
entries = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "id": ids,
            "name": st.just("t") | json_values,
            "result": json_values,
            "outcome": json_values,
        },
    ),
    max_size=3,
)
tool = {"definition": {"function": {"name": "t", "parameters": {"type": "object"}}}}


@settings(max_examples=300, deadline=None)
@given(
    recording=st.fixed_dictionaries(
        {"loop": st.just(LOOP)},
        optional={
            "tools": st.just([tool]) | json_values,
            "rounds": rounds | json_values,
            "tool_calls": entries | json_values,
            "ended": json_values,
            "usage": json_values,
            "model": json_values,
        },
    )
)
def test_the_shape_check_covers_what_the_replay_reads(recording: dict[str, Any]) -> None:
    import asyncio

    try:
        read = decode(recording)
    except RecordingUnreadable:
        return
    found = asyncio.run(replayer().replay(read, "m"))  # no other exception escapes
    assert found.ended is not None
    report = compare(read, found, CONFIG)
    assert report["answer"]["replayed"] == "fine"
