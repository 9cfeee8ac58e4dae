"""Reading an Ollama chat: a tool message answers the first unanswered call of its
``tool_name`` (of any name when it names none), whatever the order, and a turn of many
calls answered one by one is read in one pass."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.errors import BadRequest
from gateway.surfaces.ollama.request import decode_messages, parse_ollama_chat
from gateway.upstream.call_ids import stable_id


def _turn(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"name": n, "arguments": a}} for n, a in calls],
    }


def test_answers_meet_their_calls_by_name_then_by_order() -> None:
    history = [
        {"role": "user", "content": "go"},
        _turn(("f", {"i": 1}), ("g", {}), ("f", {"i": 2})),
        {"role": "tool", "content": "g's", "tool_name": "g"},
        {"role": "tool", "content": "first f's", "tool_name": "f"},
        {"role": "tool", "content": "the next unanswered"},
        {"role": "tool", "content": "nobody's", "tool_name": "h"},
    ]
    messages = decode_messages(history)
    first_f, g, second_f = messages[1].calls
    assert (first_f.id, g.id, second_f.id) == (
        stable_id("f", {"i": 1}, 0),
        stable_id("g", {}, 0),
        stable_id("f", {"i": 2}, 1),  # its place among the calls of its name
    )
    answered = [m.call_id for m in messages[2:]]
    assert answered[:3] == [g.id, first_f.id, second_f.id]
    assert answered[3] not in (first_f.id, g.id, second_f.id)


def test_a_turn_of_many_calls_answered_one_by_one() -> None:
    n = 20_000
    calls = [("f", {"i": i}) for i in range(n)]
    answers = [{"role": "tool", "content": str(i), "tool_name": "f"} for i in range(n)]
    messages = decode_messages([{"role": "user", "content": "go"}, _turn(*calls), *answers])
    ids = [call.id for call in messages[1].calls]
    assert [m.call_id for m in messages[2:]] == ids
    assert json.loads(messages[1].calls[-1].arguments) == {"i": n - 1}


@pytest.mark.parametrize(
    ("field", "value"),
    [("format", 7), ("format", "yaml"), ("format", ["json"]), ("think", 5), ("think", "max")],
)
def test_a_parameter_of_the_wrong_kind_is_a_400_naming_it(field: str, value: Any) -> None:
    """Issue 62 §7: ``"format": 7`` and ``"think": 5`` were taken in silence."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], field: value}
    with pytest.raises(BadRequest) as refused:
        parse_ollama_chat(json.dumps(body).encode(), {})
    assert refused.value.param == field


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("format", "json"),
        ("format", {"type": "object"}),
        ("format", ""),
        ("think", True),
        ("think", "high"),
    ],
)
def test_ollamas_own_values_are_taken(field: str, value: Any) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], field: value}
    parse_ollama_chat(json.dumps(body).encode(), {})
