"""Hostile numbers never reach a 500, a counter, a header or the client's usage as if
they were true (issue 34 §3): ``numbers.checked_usage`` from a table and from
hypothesis, and every metric and header writer fuzzed in-process with hostile usage.
The running gateway is in ``tests/e2e/test_hostile_numbers_e2e.py``."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from gateway.upstream.numbers import MAX_COUNT, checked_in_full, checked_usage
from tests.faults.test_fuzz import KEY, OPEN_KEY, InProcess, _answer, _completion, chunk

NEGATIVE: dict[str, Any] = {"prompt_tokens": -5, "completion_tokens": 3, "total_tokens": -2}


@pytest.mark.parametrize(
    ("raw", "believed", "refused"),
    [
        ({"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}, None, []),
        # An embedding's usage has no completion part: its total is believed.
        ({"prompt_tokens": 2, "total_tokens": 2}, None, []),
        (
            {"prompt_tokens": 5, "total_tokens": 2},
            {"prompt_tokens": 5, "total_tokens": 5},
            ["total_tokens"],
        ),
        ({"input_tokens": 4, "total_tokens": 9}, None, []),
        (NEGATIVE, {"completion_tokens": 3}, ["prompt_tokens", "total_tokens"]),
        (
            {"prompt_tokens": 10**12, "completion_tokens": 1},
            {"completion_tokens": 1},
            ["prompt_tokens"],
        ),
        (
            {"prompt_tokens": 2.5, "completion_tokens": 4.0, "total_tokens": 99},
            {"completion_tokens": 4},
            ["prompt_tokens", "total_tokens"],
        ),
        (
            {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 99},
            {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
            ["total_tokens"],
        ),
        (
            {
                "prompt_tokens": 3,
                "completion_tokens": True,
                "prompt_tokens_details": {"cached_tokens": 9},
            },
            {"prompt_tokens": 3},
            ["completion_tokens", "prompt_tokens_details.cached_tokens"],
        ),
        # An object where a count stands (found by typing the usage: it was a 500).
        (
            {"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": {"x": 1}}},
            {"prompt_tokens": 5},
            ["prompt_tokens_details.cached_tokens"],
        ),
        (
            {"prompt_tokens": {"a": 1}, "completion_tokens": 2, "total_tokens": 3},
            {"completion_tokens": 2},
            ["prompt_tokens", "total_tokens"],
        ),
        (
            {
                "input_tokens": 3,
                "output_tokens": 1,
                "output_tokens_details": {"reasoning_tokens": 2},
            },
            {"input_tokens": 3, "output_tokens": 1},
            ["output_tokens_details.reasoning_tokens"],
        ),
        (
            {"prompt_tokens": 1, "cost": 0.0012, "note": "x", "x": None},
            {"prompt_tokens": 1, "cost": 0.0012},
            [],
        ),
        ({"prompt_tokens": 1, "cost": -1.0, "list": [1]}, {"prompt_tokens": 1}, ["cost", "list"]),
        ("lots", None, ["usage"]),
        (None, None, []),
    ],
)
def test_usage_is_believed_only_where_it_could_be_true(
    raw: Any, believed: dict[str, Any] | None, refused: list[str]
) -> None:
    usage, said = checked_usage(raw)
    assert usage == (raw if believed is None and not refused else believed)
    assert said == refused


def _numbers(value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, inner in value.items():
            if isinstance(inner, dict):
                yield from _numbers(inner)
            else:
                yield key, inner


HOSTILE = st.one_of(
    st.integers(min_value=-(10**13), max_value=10**13),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
    st.lists(st.integers(), max_size=2),
)
KEYS = st.sampled_from(
    ["prompt_tokens", "completion_tokens", "total_tokens", "input_tokens", "output_tokens", "cost"]
)
USAGE = st.recursive(
    st.dictionaries(KEYS, HOSTILE, max_size=6),
    lambda inner: st.dictionaries(
        st.sampled_from(
            [
                "prompt_tokens_details",
                "completion_tokens_details",
                "cached_tokens",
                "reasoning_tokens",
                "prompt_tokens",  # counts beside details, an object where a count stands
                "completion_tokens",
                "total_tokens",
            ]
        ),
        inner | HOSTILE,
        max_size=4,
    ),
    max_leaves=12,
)


COUNT = st.one_of(
    st.integers(min_value=-3, max_value=20),
    st.sampled_from([MAX_COUNT, MAX_COUNT + 1, MAX_COUNT // 2, MAX_COUNT // 2 + 1]),
    st.integers(min_value=-2, max_value=MAX_COUNT + 2),
    HOSTILE,
)


@given(st.tuples(COUNT, COUNT, COUNT), st.booleans(), st.booleans())
@example((-1, 5, 4), False, False)
@example((5, -1, 4), False, False)
@example((1, -1, 0), False, False)
@example((MAX_COUNT, 1, MAX_COUNT + 1), False, False)
@example((MAX_COUNT + 1, 0, MAX_COUNT + 1), False, False)
@example((True, 1, 2), False, False)
@example((3.0, 1, 4), False, False)
@example((3, 1, 5), False, True)
@example((3, 1, 4.0), False, False)
def test_the_common_shapes_shortcut_reads_as_the_whole_rule(
    counts: tuple[Any, Any, Any], summed: bool, reordered: bool
) -> None:
    """Three counts (what nearly every chat answer reports) are read at once; whatever
    they say, what is kept and what is named are what the whole rule makes of them."""
    prompt, completion, total = counts
    if summed and type(prompt) is int and type(completion) is int:
        total = prompt + completion
    raw = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}
    if reordered:
        raw = dict(reversed(raw.items()))
    found, refused = checked_usage(raw)
    whole, named = checked_in_full(raw)
    assert repr((found, refused)) == repr((whole, named))  # the same types, in order


@given(USAGE)
def test_whatever_is_reported_what_is_kept_could_be_true(raw: dict[str, Any]) -> None:
    found, _ = checked_usage(raw)
    if found is None:
        return
    usage: dict[str, Any] = found
    for key, value in _numbers(usage):
        assert type(value) in (int, float), (key, value)
        assert math.isfinite(value)
        assert 0 <= value <= MAX_COUNT
        if key.endswith("tokens"):
            assert type(value) is int
    for first, second in (
        ("prompt_tokens", "completion_tokens"),
        ("input_tokens", "output_tokens"),
    ):
        if "total_tokens" in usage and first in usage and second in usage:
            assert usage["total_tokens"] == usage[first] + usage[second]
        elif "total_tokens" in usage and (first in usage or second in usage):
            assert first not in raw or second not in raw  # one part was never reported
            assert usage["total_tokens"] >= usage.get(first, usage.get(second))
    for whole, details, part in (
        ("prompt_tokens", "prompt_tokens_details", "cached_tokens"),
        ("completion_tokens", "completion_tokens_details", "reasoning_tokens"),
    ):
        inner = usage.get(details)
        detail = inner.get(part) if isinstance(inner, dict) else None
        if detail is not None:
            assert detail <= usage[whole]


# ------------------------------------------------------------------ the running gateway


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        return False
    return True


def assert_believable(usage: Any) -> None:
    """Every count in ``usage`` (None: nothing could be believed) could be true."""
    if usage is None:
        return
    for key, value in _numbers(usage.model_dump() if hasattr(usage, "model_dump") else usage):
        if value is not None and key.endswith("tokens"):
            assert isinstance(value, int), (key, value)
            assert 0 <= value <= MAX_COUNT, (key, value)


# ------------------------------------------------------------------ every writer, fuzzed


@pytest.fixture(scope="module")
def gateway() -> Iterator[InProcess]:
    made = InProcess()
    yield made
    made.close()


@settings(max_examples=60, deadline=None)
@given(usage=USAGE, stream=st.booleans(), tools=st.booleans())
def test_every_metric_and_header_writer_takes_hostile_usage(
    gateway: InProcess, usage: dict[str, Any], stream: bool, tools: bool
) -> None:
    assume(_is_json(usage))  # NaN and infinities are no JSON: a server cannot send them

    def upstream(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content).get("stream"):
            tail = chunk(choices=[], usage=usage)
            body = f"data: {json.dumps(chunk())}\n\ndata: {json.dumps(tail)}\n\ndata: [DONE]\n\n"
            return _answer(200, body.encode(), "text/event-stream")
        completion = _completion({"role": "assistant", "content": "ok"}) | {"usage": usage}
        return _answer(200, json.dumps(completion).encode())

    gateway.upstream = upstream
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    key = KEY if tools else OPEN_KEY
    answer = gateway.post(
        json.dumps(body).encode(),
        [("authorization", f"Bearer {key}"), ("content-type", "application/json")],
    )
    assert answer.status_code == 200, answer.text
    for name, value in answer.headers.items():
        if name.startswith("x-toolgate-") and value.replace(".", "", 1).isdigit():
            assert float(value) >= 0
    if not stream:
        assert_believable(answer.json().get("usage") or {})
    elif tools:  # a stream the gateway reads: its usage chunk is what it believed
        for line in answer.text.splitlines():
            if line.startswith("data: {"):
                assert_believable(json.loads(line[6:]).get("usage") or {})
    assert gateway.get("/metrics").status_code == 200
