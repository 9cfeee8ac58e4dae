"""A run drawn as a timeline (docs/design.md §19): a trace that says when each step began is
drawn as it went, calls made at once side by side in lanes of their own; an older one
is laid end to end; whatever a stored trace holds (it is hostile text) draws without
failing, every bar inside the axis and no two calls in one lane at once. A runs query
is taken or refused field by field."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import BadRequest
from gateway.store.runs import RunRow
from gateway.surfaces.operator.runs import RunQuery, timeline


def test_a_measured_trace_is_drawn_as_it_went() -> None:
    trace = {
        "rounds": [
            {
                "iteration": 1,
                "upstream": "m",
                "at_ms": 1.0,
                "duration_ms": 10.0,
                "tool_calls": ["a", "b"],
            },
            {"iteration": 2, "upstream": "m", "at_ms": 40.0, "duration_ms": 5.0, "tool_calls": []},
        ],
        "tool_calls": [
            {"id": "a", "name": "slow", "outcome": "ok", "at_ms": 11.0, "duration_ms": 28.0},
            {"id": "b", "name": "fast", "outcome": "error", "at_ms": 11.5, "duration_ms": 3.0},
        ],
    }
    drawn = timeline(trace)
    assert drawn.measured
    assert drawn.total_ms == 45.0
    assert [(b.kind, b.label, b.lane, b.outcome) for b in drawn.bars] == [
        ("round", "round 1 · m", 0, "tools"),
        ("call", "slow", 1, "ok"),
        ("call", "fast", 2, "error"),
        ("round", "round 2 · m", 0, "final"),
    ]
    assert drawn.lanes == 3


def test_an_older_trace_is_laid_end_to_end() -> None:
    trace = {
        "rounds": [
            {"iteration": 1, "duration_ms": 10.0, "tool_calls": ["a", "b"]},
            {"iteration": 2, "duration_ms": 5.0, "tool_calls": []},
        ],
        "tool_calls": [
            {"id": "a", "name": "x", "duration_ms": 7.0},
            {"id": "b", "name": "y", "duration_ms": 3.0},
        ],
    }
    drawn = timeline(trace)
    assert not drawn.measured
    assert [(b.label.split(" ·")[0], b.at_ms, b.lane) for b in drawn.bars] == [
        ("round 1", 0.0, 0),
        ("x", 10.0, 1),
        ("y", 10.0, 2),
        ("round 2", 17.0, 0),
    ]
    assert drawn.total_ms == 22.0


def test_a_calls_wait_for_an_operator_is_drawn_before_it_in_its_lane() -> None:
    trace = {
        "rounds": [
            {
                "iteration": 1,
                "upstream": "m",
                "at_ms": 0.0,
                "duration_ms": 5.0,
                "tool_calls": ["a"],
            },
            {"iteration": 2, "upstream": "m", "at_ms": 905.0, "duration_ms": 5.0},
        ],
        "tool_calls": [
            {
                "id": "a",
                "name": "refund",
                "outcome": "ok",
                "at_ms": 800.0,
                "duration_ms": 100.0,
                "policy": {"verdict": "approved", "waited_ms": 795.0},
            },
        ],
    }
    drawn = timeline(trace)
    assert [(b.kind, b.label, b.at_ms, b.duration_ms, b.lane) for b in drawn.bars] == [
        ("round", "round 1 · m", 0.0, 5.0, 0),
        ("wait", "waiting for approval", 5.0, 795.0, 1),
        ("call", "refund", 800.0, 100.0, 1),
        ("round", "round 2 · m", 905.0, 5.0, 0),
    ]


def test_a_label_near_the_right_edge_ends_there_instead_of_being_cut() -> None:
    from gateway.surfaces.console.shapes import CHAR_UNITS
    from gateway.surfaces.console.shapes import steps as drawn_steps

    name = "a_rather_long_tool_name_for_the_edge"
    trace = {
        "rounds": [{"iteration": 1, "upstream": "m", "at_ms": 0.0, "duration_ms": 950.0}],
        "tool_calls": [{"id": "a", "name": name, "at_ms": 950.0, "duration_ms": 50.0}],
    }
    drawn = drawn_steps(timeline(trace))
    first, last = drawn
    assert (first["anchor"], first["label_x"]) == ("start", 4.0)
    assert last["anchor"] == "end"
    assert last["label_x"] <= 996
    assert last["label_x"] - CHAR_UNITS * len(name) >= 0


json_values = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
steps = st.dictionaries(
    st.sampled_from(["id", "name", "at_ms", "duration_ms", "tool_calls", "iteration", "policy"]),
    json_values
    | st.floats(min_value=-1e9, max_value=1e9)
    | st.fixed_dictionaries({"waited_ms": json_values | st.floats(min_value=-1e9, max_value=1e9)}),
)


@given(
    rounds=st.lists(steps, max_size=6) | json_values,
    calls=st.lists(steps, max_size=8) | json_values,
)
def test_whatever_a_trace_holds_draws_inside_its_axis(rounds: Any, calls: Any) -> None:
    drawn = timeline({"rounds": rounds, "tool_calls": calls})
    ends: dict[int, list[tuple[float, float]]] = {}
    for bar in drawn.bars:
        assert bar.at_ms >= 0
        assert bar.duration_ms >= 0
        assert bar.at_ms + bar.duration_ms <= drawn.total_ms
        assert 0 <= bar.lane < drawn.lanes
        if bar.kind in ("call", "wait"):  # a call and its wait for approval: one lane
            for start, end in ends.get(bar.lane, []):
                assert bar.at_ms >= end or bar.at_ms + bar.duration_ms <= start or start == end
            ends.setdefault(bar.lane, []).append((bar.at_ms, bar.at_ms + bar.duration_ms))


def _row(**extra: Any) -> RunRow:
    fields: dict[str, Any] = {"model": "m", "route": "/r", "status": 200, "latency_ms": 1.0}
    return RunRow("r", 1.0, "acme", **(fields | extra))


def test_a_query_admits_what_it_names() -> None:
    query = RunQuery.of({"status": "error", "tool": "t", "min_cost": "0.5", "model": "m"})
    assert query.admits(_row(status=502, tools=("t",), cost_usd=0.75))
    assert not query.admits(_row(status=200, tools=("t",), cost_usd=0.75))
    assert not query.admits(_row(status=502, tools=("u",), cost_usd=0.75))
    assert not query.admits(_row(status=502, tools=("t",), cost_usd=None))
    assert not query.admits(_row(status=502, tools=("t",), cost_usd=0.75, model="n"))
    assert RunQuery.of({}).admits(_row(status=500))


@given(
    st.dictionaries(
        st.sampled_from(["status", "min_cost", "limit", "tenant", "x"]), st.text(max_size=12)
    )
)
def test_any_query_is_a_query_or_a_400_naming_its_field(query: dict[str, str]) -> None:
    refused: BadRequest | None = None
    try:
        made = RunQuery.of(query)
    except BadRequest as exc:
        refused = exc
    if refused is not None:
        assert refused.param in {"status", "min_cost", "limit"}
        return
    assert 1 <= made.limit <= 1000
    assert made.min_cost_usd is None or made.min_cost_usd >= 0


@pytest.mark.parametrize("cost", ["inf", "-1", "1e400", "abc"])
def test_a_cost_that_is_no_amount_is_refused(cost: str) -> None:
    with pytest.raises(BadRequest):
        RunQuery.of({"min_cost": cost})
