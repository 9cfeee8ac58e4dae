"""``pick`` keeps fields away from the model: an answer it cannot be applied to is an
error result saying why, never the raw body (issue 14). Without ``pick`` an answer
that is not JSON goes to the model as text."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tool_registry.results import success_result
from tool_registry.spec import ResultSpec

SECRET = "SECRET-FIELD-VALUE-7c1e"
PICK = ResultSpec(pick="public", max_chars=100_000)
DOCUMENT = {"public": "ok", "secret": SECRET}


def shapes() -> dict[str, tuple[bytes, bool]]:
    valid = json.dumps(DOCUMENT).encode()
    return {
        "deep nesting": (
            b'{"public": "ok", "secret": "'
            + SECRET.encode()
            + b'", "x": '
            + b"[" * 1100
            + b"]" * 1100
            + b"}",
            False,
        ),
        "over the byte cap": (valid[: len(valid) // 2], True),
        "NaN": (valid[:-1] + b', "n": NaN}', False),
        "trailing text": (valid + b" and more", False),
        "two documents": (valid + valid, False),
        "not JSON at all": (b"public=ok secret=" + SECRET.encode(), False),
    }


@pytest.mark.parametrize("shape", list(shapes()))
def test_a_body_pick_cannot_read_is_an_unreadable_error_never_the_body(shape: str) -> None:
    body, truncated = shapes()[shape]
    result = success_result(PICK, 200, body, "utf-8", truncated)
    assert result.outcome == "unreadable"
    assert SECRET not in result.content
    assert json.loads(result.content)["error"].startswith("the tool's answer could not be read")


def test_valid_answers_are_picked() -> None:
    assert success_result(PICK, 200, json.dumps(DOCUMENT).encode(), None, False).content == '"ok"'
    big = b'{"public": 12345678901234567890123, "secret": 1}'
    assert success_result(PICK, 200, big, None, False).content == "12345678901234567890123"


def test_without_pick_a_body_that_is_not_json_goes_as_text() -> None:
    spec = ResultSpec(max_chars=20)
    result = success_result(spec, 200, b"hello {not json} " + b"x" * 50, None, False)
    assert result.outcome == "ok"
    assert result.content == "hello {not json} xxx…[truncated 47 characters]"


_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
_damage = st.sampled_from(["none", "trailing", "nan", "cut", "deep", "prefix"])


@given(_values, _values, _damage, st.integers(min_value=0, max_value=10_000))
def test_picked_away_fields_never_reach_the_model(
    public: object, extra: object, damage: str, at: int
) -> None:
    document = {"public": public, "other": extra, "secret": SECRET}
    body = json.dumps(document).encode()
    truncated = False
    if damage == "trailing":
        body += b" }"
    elif damage == "nan":
        body = body[:-1] + b', "z": NaN}'
    elif damage == "cut":
        body, truncated = body[: at % max(len(body), 1)], True
    elif damage == "deep":
        body = body[:-1] + b', "d": ' + b"[" * 2000 + b"]" * 2000 + b"}"
    elif damage == "prefix":
        body = b"garbage " + body
    result = success_result(PICK, 200, body, "utf-8", truncated)
    assert SECRET not in result.content
    assert result.outcome in ("ok", "unreadable")
