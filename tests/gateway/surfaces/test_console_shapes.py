"""What the console's pages show of a call's arguments (docs/design.md §19): the model's JSON
indented to read; what does not parse as it came; megabytes cut, not parsed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.surfaces.console.shapes import (
    SHOWN_CHARS,
    asked_of,
    budget_words,
    kept_row,
    pretty,
    took,
)


def test_arguments_are_indented_where_they_parse() -> None:
    assert pretty('{"a": [1, 2]}') == json.dumps({"a": [1, 2]}, indent=2)
    assert pretty({"a": 1}) == '{\n  "a": 1\n}'
    assert pretty("{not json") == "{not json"


def test_megabytes_of_arguments_are_cut() -> None:
    huge = json.dumps({"notes": "<script>" * 200_000})
    shown = pretty(huge)
    assert len(shown) < SHOWN_CHARS + 64
    assert shown.endswith(f"…[{len(huge) - SHOWN_CHARS} more characters]")
    assert len(pretty({"notes": "x" * 200_000})) < SHOWN_CHARS + 64


def test_what_a_recording_asked_whichever_surface_it_came_by() -> None:
    """Issue 52 §5: the Replay page's "Asked" was empty for Responses recordings."""
    chat = {
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    }
    parts = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "a"},
                    {"type": "image"},
                    {"type": "text", "text": "b"},
                ],
            }
        ]
    }
    responses_text = {"input": "how long is toolgate?"}
    responses_items = {
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "first"}]},
            {"type": "function_call_output", "call_id": "c1", "output": "8"},
            {"role": "user", "content": "second"},
        ]
    }
    assert asked_of(chat) == "hi"
    assert asked_of(parts) == "a b"
    assert asked_of(responses_text) == "how long is toolgate?"
    assert asked_of(responses_items) == "second"
    hostiles: list[Any] = [None, [], {"input": 7}, {"messages": "x" * 3}, {"messages": [None, 3]}]
    for hostile in hostiles:
        assert isinstance(asked_of(hostile), str)
    assert kept_row({"request": {"input": "y" * 1000}})["asked"] == "y" * 200


def test_every_run_outcome_has_words_and_amounts_read_as_dollars() -> None:
    from gateway.engine.report import RUN_OUTCOMES
    from gateway.surfaces.console.shapes import OUTCOME_WORDS, dollars, plain

    assert set(OUTCOME_WORDS) == set(RUN_OUTCOMES)
    assert dollars(7.6e-05) == "$0.000076"
    assert dollars(0.25) == "$0.2500"
    assert dollars(0) == "$0.0000"
    assert dollars(None) == "—"
    assert plain(7.6e-05) == "0.000076"
    assert plain(2.0) == "2"
    assert "e" not in dollars(1e-9) + plain(1e-9)


@pytest.mark.parametrize(
    ("ms", "said"),
    [
        (0.4, "0.4 ms"),
        (412.5, "412.5 ms"),
        (39965.4, "40.0 s"),
        (192_000.0, "3 min 12 s"),
        (None, "—"),
    ],
)
def test_a_time_taken_reads_as_a_person_says_it(ms: float | None, said: str) -> None:
    """Issue 62 §8: long times read ``39965.4 ms``."""
    assert took(ms) == said


def test_a_rounds_budget_reads_figure_by_figure() -> None:
    """Issue 62 §8: ``cost_usd 3.92e-05`` ran together with its neighbours."""
    said = budget_words({"cost_usd": 3.92e-05, "tokens": 1200, "time_s": 4})
    assert said == "cost $0.0000392, tokens 1200, time_s 4"
