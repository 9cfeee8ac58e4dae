"""Tool search's embeddings answers, read strictly (gateway/policy/meanings.py): an
embeddings server is hostile input like any upstream."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.policy.meanings import MAX_WIDTH, EmbeddingsFailed, parse_vectors


def answer(*vectors: Any, **extra: Any) -> bytes:
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    return json.dumps({"object": "list", "data": data, **extra}).encode()


def test_vectors_come_back_in_the_texts_order() -> None:
    body = json.dumps(
        {"data": [{"index": 1, "embedding": [0, 1]}, {"index": 0, "embedding": [1.5, 0]}]}
    ).encode()
    assert parse_vectors(body, 2) == [[1.5, 0], [0, 1]]


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        answer([1.0]),  # one for two texts
        answer([1.0], [1.0, 2.0]),  # widths differ
        answer([1.0], ["x"]),
        answer([1.0], [True]),
        answer([1.0], []),
        answer([1.0], [0.0] * (MAX_WIDTH + 1)),
        json.dumps(
            {"data": [{"index": 0, "embedding": [1]}, {"index": 0, "embedding": [1]}]}
        ).encode(),  # one index twice
        json.dumps(
            {"data": [{"index": 5, "embedding": [1]}, {"index": 0, "embedding": [1]}]}
        ).encode(),
        b'{"data": [{"embedding": [NaN]}, {"embedding": [1]}]}',
        b'{"data": [{"embedding": [1e999]}, {"embedding": [1]}]}',
    ],
)
def test_anything_but_one_finite_vector_per_text_is_refused(body: bytes) -> None:
    with pytest.raises(EmbeddingsFailed):
        parse_vectors(body, 2)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=9), inner),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        JSON.map(lambda v: json.dumps(v).encode()),
        st.builds(
            lambda items: json.dumps({"data": items}).encode(),
            st.lists(
                st.fixed_dictionaries(
                    {"index": st.integers(-2, 4) | st.booleans(), "embedding": JSON}
                ),
                max_size=4,
            ),
        ),
        st.binary(max_size=64),
    ),
    st.integers(1, 3),
)
def test_any_answer_gives_vectors_or_a_refusal(body: bytes, count: int) -> None:
    try:
        vectors = parse_vectors(body, count)
    except EmbeddingsFailed:
        return
    assert len(vectors) == count
    assert len({len(v) for v in vectors}) == 1
