"""The loop engine's events, without HTTP: a scripted model server in-process, tools
behind ``httpx.MockTransport``."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable
from dataclasses import replace
from typing import Any, TypeVar

import httpx
import pytest

from gateway.chat_json import encode_tool
from gateway.config import UpstreamConfig
from gateway.engine.loop import (
    Event,
    Final,
    HandBack,
    LoopJob,
    Run,
    ToolLoop,
    Working,
    set_apart,
)
from gateway.errors import ToolLimitExceeded, UpstreamError
from gateway.policy.limits import LoopLimits
from gateway.policy.point import PolicyPoint
from gateway.upstream.openai.model import ChatModel, Trace
from gateway.upstream.port import ModelAsk
from gateway.upstream.rounds import Declarations
from gateway.values import (
    AssistantMessage,
    ChoiceDelta,
    HiddenItem,
    Message,
    Parameters,
    ToolCall,
    ToolOutput,
)
from tool_registry import (
    CallContext,
    EgressPolicy,
    HttpTool,
    ToolExecutor,
    ToolRegistry,
    ToolSpec,
    create_tool_transport,
)

T = TypeVar("T")

pytestmark = pytest.mark.anyio

UPSTREAM = UpstreamConfig(name="up", base_url="http://upstream.test/v1")
TOOLS = [
    ToolSpec.model_validate(
        {
            "name": "double",
            "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}},
            "http": {"url": "http://tools.test/double/{n}"},
        }
    )
]


def call(call_id: str, name: str, arguments: str = "{}") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def message(content: str | None = None, *calls: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        found["tool_calls"] = list(calls)
    return found


class Model:
    """A model server that answers each round with the next scripted message and
    records every request it was sent."""

    def __init__(self, *answers: dict[str, Any], stall: bool = False) -> None:
        self._answers = list(answers)
        self.requests: list[dict[str, Any]] = []
        self._stall = stall  # streams end without a finish_reason

    async def chat(
        self,
        upstream: UpstreamConfig,
        body: dict[str, Any],
        read: Callable[[dict[str, Any]], T],
        trace: Trace = None,
    ) -> T:
        return read(self.answer(body))

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(json.loads(json.dumps(body)))
        answer = self._answers.pop(0)
        finish = "tool_calls" if answer.get("tool_calls") else "stop"
        return {
            "id": "c",
            "choices": [{"index": 0, "message": answer, "finish_reason": finish}],
            "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3},
            "system_fingerprint": "fp",
        }

    async def chat_stream(
        self, upstream: UpstreamConfig, body: dict[str, Any], trace: Trace = None
    ) -> AsyncGenerator[dict[str, Any], None]:
        completion = self.answer(body)
        answer = completion["choices"][0]["message"]
        for word in (answer.get("content") or "").split():
            yield {"choices": [{"index": 0, "delta": {"content": word}}]}
        for index, tool_call in enumerate(answer.get("tool_calls") or []):
            yield {
                "choices": [{"index": 0, "delta": {"tool_calls": [{"index": index, **tool_call}]}}]
            }
        if not self._stall:
            finish = completion["choices"][0]["finish_reason"]
            yield {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
        yield {"choices": [], "usage": completion["usage"]}


def doubling(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json=int(request.url.path.rsplit("/", 1)[-1]) * 2)


class Kept:
    def __init__(self) -> None:
        self.turns: list[
            tuple[list[HiddenItem], AssistantMessage, list[ToolOutput], tuple[ToolCall, ...]]
        ] = []
        self.taints: list[str | None] = []

    async def __call__(
        self,
        before: list[HiddenItem],
        turn: AssistantMessage,
        outputs: list[ToolOutput],
        handed: tuple[ToolCall, ...],
        taint: str | None,
    ) -> None:
        self.turns.append((list(before), turn, outputs, handed))
        self.taints.append(taint)


def session(
    model: Model,
    limits: LoopLimits | None = None,
    client_tool_names: frozenset[str] = frozenset(),
    **changes: Any,
) -> Run:
    registry = ToolRegistry(HttpTool(spec) for spec in TOOLS)
    limits = limits or LoopLimits(4, 8, 4, 30.0, "final_answer")
    policy = PolicyPoint(limits, ("double",), client_tool_names, registry)
    ask = ModelAsk(
        UPSTREAM,
        "target",
        Parameters(),
        (Message("user", "hi"),),
        server_tools=registry.definitions(("double",)),
        client_names=client_tool_names,
    )
    chat = ChatModel(model, ask, Declarations(encode_tool))
    job = replace(LoopJob(chat, policy, CallContext("t", {})), **changes)
    executor = ToolExecutor(
        create_tool_transport(EgressPolicy(), inner=httpx.MockTransport(doubling))
    )
    [run] = ToolLoop(executor).runs(job)
    return run


async def events(model: Model, loop: Run, stream: bool) -> list[Event]:
    """Every event of the loop, running the work as a driver does."""
    seen: list[Event] = []
    async for event in loop.events(stream):
        seen.append(event)
        if isinstance(event, Working):
            await event.start()
    return seen


@pytest.mark.parametrize("stream", [False, True])
async def test_a_server_tool_round_then_the_answer(stream: bool) -> None:
    model = Model(message(None, call("t1", "double", '{"n": 21}')), message("it is 42"))
    loop = session(model)
    seen = await events(model, loop, stream)
    kinds = [type(e).__name__ for e in seen]
    assert kinds == (
        ["Working", "ChoiceDelta", "ChoiceDelta", "ChoiceDelta", "Final"]
        if stream
        else ["Working", "Final"]
    )
    final = seen[-1]
    assert isinstance(final, Final)
    assert final.answer.turn == AssistantMessage("it is 42" if not stream else "itis42")
    assert (final.finish_reason, final.dropped) == ("stop", False)
    assert [d.delta for d in seen if isinstance(d, ChoiceDelta)] == (
        [{"content": w} for w in ("it", "is", "42")] if stream else []
    )
    # What the model read in the second round: the hidden turn and the tool's answer.
    assert model.requests[1]["messages"][1:] == [
        {"role": "assistant", "content": None, "tool_calls": [call("t1", "double", '{"n": 21}')]},
        {"role": "tool", "tool_call_id": "t1", "content": "42"},
    ]
    assert [r["model"] for r in model.requests] == ["target", "target"]
    assert loop.state.iterations == 2
    assert loop.state.tool_calls == 1
    assert loop.state.usage.totals == {
        "prompt_tokens": 4,
        "completion_tokens": 2,
        "total_tokens": 6,
    }
    assert loop.hidden == [
        AssistantMessage(None, (ToolCall("t1", "double", '{"n": 21}'),)),
        ToolOutput("t1", "42"),
    ]


async def test_a_mixed_turn_runs_the_server_call_and_hands_the_client_call_back() -> None:
    kept = Kept()
    model = Model(
        message(None, call("s0", "double", '{"n": 1}')),
        message("both", call("s1", "double", '{"n": 2}'), call("c1", "ask_user")),
    )
    loop = session(model, client_tool_names=frozenset({"ask_user"}), keep=kept)
    seen = await events(model, loop, stream=False)
    assert [type(e) for e in seen] == [Working, Working, HandBack]
    hand_back = seen[-1]
    assert isinstance(hand_back, HandBack)
    assert hand_back.calls == (ToolCall("c1", "ask_user", "{}"),)
    assert hand_back.answer.raw is not None  # the surface renders from the whole completion
    [(before, turn, outputs, handed)] = kept.turns
    assert before == [
        AssistantMessage(None, (ToolCall("s0", "double", '{"n": 1}'),)),
        ToolOutput("s0", "2"),
    ]
    assert [c.id for c in turn.calls] == ["s1", "c1"]
    assert outputs == [ToolOutput("s1", "4")]
    assert handed == hand_back.calls


async def test_a_single_call_surface_hands_back_one_call_under_its_id() -> None:
    kept = Kept()
    model = Model(message(None, call("s1", "double", '{"n": 2}'), call("a", "f"), call("b", "g")))
    names = frozenset({"f", "g"})
    loop = session(model, client_tool_names=names, keep=kept, single_call_id="call_legacy_1")
    seen = await events(model, loop, stream=True)
    hand_back = seen[-1]
    assert isinstance(hand_back, HandBack)
    assert hand_back.calls == (ToolCall("call_legacy_1", "f", "{}"),)
    [(_, turn, _, _)] = kept.turns
    assert [c.id for c in turn.calls] == ["s1", "call_legacy_1"]  # "b" left the turn


async def test_the_last_round_drops_calls_and_says_stop() -> None:
    model = Model(
        message(None, call("t1", "double", '{"n": 1}')), message("x", call("t2", "double"))
    )
    loop = session(model, limits=LoopLimits(2, 8, 4, 30.0, "final_answer"))
    seen = await events(model, loop, stream=False)
    final = seen[-1]
    assert isinstance(final, Final)
    assert (final.finish_reason, final.dropped) == ("stop", True)
    # The last round offers no tools (a server would render them into the prompt and
    # the model write a call as text); its history is the same as any round's.
    assert "tools" in model.requests[0]
    assert "tools" not in model.requests[1]
    assert "tool_choice" not in model.requests[1]
    assert [m["role"] for m in model.requests[1]["messages"]] == ["user", "assistant", "tool"]
    assert loop.stopped == "max_iterations"


async def test_a_cap_in_error_mode_ends_the_loop_with_a_422() -> None:
    model = Model(message(None, call("t1", "double", '{"n": 1}'), call("t2", "double", '{"n": 2}')))
    loop = session(model, limits=LoopLimits(4, 1, 4, 30.0, "error"))
    with pytest.raises(ToolLimitExceeded):
        await events(model, loop, stream=False)
    assert loop.state.caps == ["tool_calls"]
    assert loop.state.tool_calls == 0


async def test_a_stream_without_a_finish_reason_is_the_upstreams_fault() -> None:
    model = Model(message("half"), stall=True)
    with pytest.raises(UpstreamError, match="ended the stream early"):
        await events(model, session(model), stream=True)


async def test_unknown_tools_are_answered_not_run() -> None:
    model = Model(message(None, call("t1", "delete_all")), message("ok"))
    loop = session(model)
    await events(model, loop, stream=False)
    [answer] = [m for m in model.requests[1]["messages"] if m["role"] == "tool"]
    error = json.loads(answer["content"])["error"]
    assert error == "This tool is not available. Available tools: double."
    assert loop.state.tool_calls == 0


@pytest.mark.parametrize(
    ("before", "starts"),
    [("first.", "\n\nIt"), ("first.\n", "\nIt"), ("first.\n\n", "It"), ("a\n\n\n", "It")],
)
def test_a_rounds_text_is_set_apart_from_the_last_one(before: str, starts: str) -> None:
    piece = set_apart(ChoiceDelta({"content": "It", "refusal": "r"}), before)
    assert piece.delta == {"content": starts, "refusal": "r"}
