"""The pure decisions of the gateway, from tables."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import LimitsConfig
from gateway.errors import BadRequest, PolicyDenied, ToolLimitExceeded
from gateway.policy.caps import CapDecision, LoopState, check_caps, decide, last_round_due
from gateway.policy.limits import LoopLimits, Narrowing, effective_limits, effective_tools
from gateway.policy.partition import partition_calls
from gateway.surfaces.chat.request import parse_chat_request
from gateway.surfaces.request_fields import parse_narrowing
from gateway.values import ToolCall, Usage


def limits(**changes: Any) -> LoopLimits:
    values: dict[str, Any] = {
        "max_iterations": 4,
        "max_tool_calls": 5,
        "max_parallel_tools": 2,
        "request_timeout_s": 60.0,
        "on_limit": "final_answer",
    }
    return LoopLimits(**{**values, **changes})


@pytest.mark.parametrize(
    ("state", "lim", "pending", "time_left", "expected"),
    [
        (LoopState(iterations=1), limits(), 2, 10.0, None),
        (LoopState(iterations=1, tool_calls=3), limits(), 2, 10.0, None),
        (LoopState(iterations=1, tool_calls=4), limits(), 2, 10.0, CapDecision("tool_calls", 1)),
        (LoopState(iterations=1, tool_calls=5), limits(), 1, 10.0, CapDecision("tool_calls", 0)),
        (LoopState(iterations=4), limits(on_limit="error"), 1, 10.0, CapDecision("iterations", 0)),
        (LoopState(iterations=1), limits(), 1, 0.0, CapDecision("time", 0)),
    ],
)
def test_check_caps(
    state: LoopState, lim: LoopLimits, pending: int, time_left: float, expected: CapDecision | None
) -> None:
    assert check_caps(state, lim, pending, time_left) == expected


@pytest.mark.parametrize(
    ("iterations", "on_limit", "forced", "due"),
    [
        (0, "final_answer", False, False),
        (2, "final_answer", False, False),
        (3, "final_answer", False, True),  # the fourth call is the last of four
        (3, "error", False, False),
        (1, "error", True, True),
    ],
)
def test_last_round_due(iterations: int, on_limit: str, forced: bool, due: bool) -> None:
    state = LoopState(iterations=iterations, forced_final=forced)
    assert last_round_due(state, limits(on_limit=on_limit)) is due


def test_the_state_changes_only_as_the_loop_goes() -> None:
    state, lim = LoopState(), limits(max_iterations=2)
    assert state.begin_round(lim) == (1, False)
    state.count_round({"total_tokens": 3})
    assert state.begin_round(lim) == (2, True)  # the last of two, with final_answer
    state.reserved = 3
    state.start_tools(2, held=3)
    assert (state.reserved, state.tool_calls) == (0, 2)
    state.start_tools(1, held=0)
    state.start_tools(1, held=5)  # never below zero
    assert (state.reserved, state.tool_calls) == (0, 4)
    state.time_ran_out(lim)
    assert state.forced_final
    assert state.caps == ["time"]
    assert state.usage.totals == {"total_tokens": 3}
    with pytest.raises(ToolLimitExceeded, match="request_timeout_s"):
        LoopState().time_ran_out(limits(on_limit="error"))


def test_usage_sums_nested_details() -> None:
    total = Usage()
    total.add(
        {
            "prompt_tokens": 3,
            "completion_tokens": 2,
            "total_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 1},
        },
    )
    total.add(
        {
            "prompt_tokens": 4,
            "completion_tokens": 1,
            "total_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 2},
            "note": "x",
        },
    )
    total.add(None)
    total.add({"completion_tokens": True, "prompt_tokens_details": 3})
    assert total.tokens("prompt_tokens") == 7
    assert total.tokens("prompt_tokens_details") == 0
    assert total.totals == {
        "prompt_tokens": 7,
        "completion_tokens": 3,
        "total_tokens": 10,
        "prompt_tokens_details": {"cached_tokens": 3},
    }


def call(name: str | None, kind: str = "function", call_id: str | None = None) -> ToolCall:
    if kind == "custom":
        return ToolCall(call_id or str(name), name, "", "custom")
    return ToolCall(call_id or str(name), name, "{}")


@pytest.mark.parametrize(
    ("names", "state", "lim", "kind", "client", "hidden", "runnable", "forced"),
    [
        (["s1"], LoopState(iterations=1), limits(), "run_tools", [], [], 1, False),
        (["c1"], LoopState(iterations=1), limits(), "hand_back", ["c1"], [], 0, False),
        (
            ["s1", "c1", "nope"],
            LoopState(iterations=1),
            limits(),
            "hand_back",
            ["c1"],
            ["s1", "nope"],
            1,
            False,
        ),
        # At the iteration cap a hand-back needs no further round: no 422, no forcing.
        (
            ["s1", "c1"],
            LoopState(iterations=4),
            limits(on_limit="error"),
            "hand_back",
            ["c1"],
            ["s1"],
            1,
            False,
        ),
        # Over the tool budget: what fits runs, the rest is refused; nothing forced.
        (
            ["s1", "s2", "c1"],
            LoopState(iterations=1, tool_calls=4),
            limits(),
            "hand_back",
            ["c1"],
            ["s1", "s2"],
            1,
            False,
        ),
        (
            ["s1", "s2"],
            LoopState(iterations=1, tool_calls=4),
            limits(),
            "run_tools",
            [],
            [],
            1,
            True,
        ),
    ],
)
def test_decide(
    names: list[str],
    state: LoopState,
    lim: LoopLimits,
    kind: str,
    client: list[str],
    hidden: list[str],
    runnable: int,
    forced: bool,
) -> None:
    step = decide(
        state,
        lim,
        [call(n) for n in names],
        frozenset({"s1", "s2"}),
        frozenset({"c1"}),
        False,
        10.0,
    )
    assert step.kind == kind
    assert [c.id for c in step.calls] == client
    assert [c.id for c in step.hidden] == hidden
    assert step.runnable == runnable
    reserved = state.reserved
    state.take(step, lim)
    assert state.forced_final is forced
    assert state.reserved == reserved + runnable


def test_a_cap_taken_in_error_mode_is_a_422_and_is_recorded() -> None:
    state, lim = LoopState(iterations=1, tool_calls=5), limits(on_limit="error")
    step = decide(
        state, lim, [call("s1"), call("c1")], frozenset({"s1"}), frozenset({"c1"}), False, 10.0
    )
    assert step.cap == "tool_calls"
    with pytest.raises(ToolLimitExceeded):
        state.take(step, lim)
    assert state.caps == ["tool_calls"]
    assert (
        decide(LoopState(), limits(), [call("s1")], frozenset({"s1"}), frozenset(), True, 10.0).kind
        == "answer"
    )


def test_partition_calls() -> None:
    calls = [
        call("s1"),
        call("c1"),
        call("nope"),
        call("s2"),
        call("c2", "custom"),
        call("s1", "custom", "s1-custom"),  # a server tool is a function, never custom
        call(None, call_id="x"),
    ]
    part = partition_calls(calls, {"s1", "s2"}, {"c1", "c2"})
    assert [c.id for c in part.server] == ["s1", "s2"]
    assert [c.id for c in part.client] == ["c1", "c2"]
    assert [c.id for c in part.unavailable] == ["nope", "s1-custom", "x"]


@pytest.mark.parametrize(
    ("field", "headers", "expected"),
    [
        (None, {}, Narrowing()),
        ({"tools": ["a", "b"]}, {"x-toolgate-tools": "b, c"}, Narrowing(frozenset({"b"}))),
        (None, {"x-toolgate-tools": ""}, Narrowing(frozenset())),
        ({"max_iterations": 5}, {"x-toolgate-max-iterations": "3"}, Narrowing(None, 3)),
        ({"max_tool_calls": 0}, {}, Narrowing(None, None, 0)),
    ],
)
def test_parse_narrowing(field: Any, headers: dict[str, str], expected: Narrowing) -> None:
    assert parse_narrowing(field, headers) == expected


@pytest.mark.parametrize(
    ("field", "headers", "param"),
    [
        ("tools", {}, "toolgate"),
        ({"max_iterations": 0}, {}, "toolgate.max_iterations"),
        ({"max_iterations": True}, {}, "toolgate.max_iterations"),
        ({"tools": "a"}, {}, "toolgate.tools"),
        ({"colour": 1}, {}, "toolgate"),
        (None, {"x-toolgate-max-iterations": "many"}, "x-toolgate-max-iterations"),
        (None, {"x-toolgate-max-tool-calls": "-1"}, "x-toolgate-max-tool-calls"),
    ],
)
def test_bad_narrowing_is_400(field: Any, headers: dict[str, str], param: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_narrowing(field, headers)
    assert caught.value.param == param


def test_parse_chat_request_removes_the_toolgate_field() -> None:
    raw = (
        b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": true,'
        b' "toolgate": {"max_iterations": 2},'
        b' "tools": [{"type": "function", "function": {"name": "f"}}]}'
    )
    chat = parse_chat_request(raw, {})
    assert "toolgate" not in chat.body
    assert chat.changed
    assert chat.stream
    assert chat.client_tool_names == frozenset({"f"})
    assert chat.narrowing.max_iterations == 2


def test_effective_limits_only_narrow() -> None:
    tenant = LimitsConfig(max_iterations=4, max_tool_calls=10)
    assert effective_limits(tenant, Narrowing(None, 9, 20)).max_iterations == 4
    assert effective_limits(tenant, Narrowing(None, 9, 20)).max_tool_calls == 10
    assert effective_limits(tenant, Narrowing(None, 2, 3)).max_iterations == 2
    assert effective_limits(tenant, Narrowing(None, 2, 3)).max_tool_calls == 3


def test_effective_tools() -> None:
    allowed = ("a", "b", "c")
    assert effective_tools(allowed, Narrowing(), frozenset()) == (allowed, ())
    narrowed = Narrowing(frozenset({"c", "a"}))
    assert effective_tools(allowed, narrowed, frozenset()) == (("a", "c"), ())
    assert effective_tools(allowed, Narrowing(frozenset({"a"})), frozenset({"b"})) == (("a",), ())
    with pytest.raises(PolicyDenied, match="'z' is not available"):
        effective_tools(allowed, Narrowing(frozenset({"a", "z"})), frozenset())
    # A client tool of a server tool's name wins: the server tool is out of play.
    assert effective_tools(allowed, Narrowing(), frozenset({"b", "x"})) == (("a", "c"), ("b",))
    every = frozenset(allowed)
    assert effective_tools(allowed, Narrowing(), every) == ((), allowed)
    # With the allowlist as a set (a tenant keeps one), the same answers.
    assert effective_tools(allowed, Narrowing(), frozenset({"x"}), every) == (allowed, ())
    assert effective_tools(allowed, Narrowing(), frozenset({"b", "x"}), every) == (
        ("a", "c"),
        ("b",),
    )
