"""The quick check of a model's arguments says yes only where jsonschema does, and says
it for the common schemas; everything else is jsonschema's, errors included."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tool_registry import ToolArgumentsInvalid
from tool_registry.arguments import ArgumentValidator
from tool_registry.quick_check import MAX_NODES, quick_check
from tool_registry.schemas import NO_RETRIEVAL, SafeValidator

NAMES = st.sampled_from(["a", "b", "c", "d"])
NUMBER = st.one_of(st.integers(-5, 5), st.floats(-5, 5, allow_nan=False))
SCALAR = st.fixed_dictionaries(
    {"type": st.sampled_from(["string", "integer", "number", "boolean", "null"])},
    optional={
        "description": st.text(max_size=4),
        "enum": st.lists(st.text("ab", max_size=2), max_size=3),
        "minimum": NUMBER,
        "maximum": NUMBER,
        "minLength": st.integers(0, 3),
        "maxLength": st.integers(0, 3),
        "maxItems": st.integers(0, 1),  # of arrays only: here it asserts nothing
        "format": st.sampled_from(["date", "email"]),
        "default": st.integers(),
    },
)
# Now and then a keyword the quick check does not read: it reads none of that schema.
OUTSIDE = st.fixed_dictionaries(
    {"type": st.sampled_from(["string", "integer"])},
    optional={"pattern": st.just("^a"), "enum": st.lists(st.integers(-2, 2), max_size=2)},
)


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.fixed_dictionaries(
            {"type": st.just("object")},
            optional={
                "properties": st.dictionaries(NAMES, inner, max_size=3),
                "required": st.lists(NAMES, max_size=3, unique=True),
                "additionalProperties": st.booleans(),
                "title": st.text(max_size=3),
            },
        ),
        st.fixed_dictionaries(
            {"type": st.just("array")},
            optional={
                "items": inner,
                "minItems": st.integers(0, 2),
                "maxItems": st.integers(0, 3),
            },
        ),
    )


SCHEMA = st.recursive(st.one_of(SCALAR, SCALAR, SCALAR, OUTSIDE), _containers, max_leaves=8)
VALUE = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-6, 6),
        st.floats(-6, 6, allow_nan=False),
        st.sampled_from([1.0, 2.0, 0.0]),
        st.text("abc", max_size=4),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(NAMES, inner, max_size=4)),
    max_leaves=10,
)


@settings(max_examples=600, deadline=None)
@given(SCHEMA, VALUE)
def test_a_quick_yes_is_jsonschemas_yes(schema: dict[str, Any], value: Any) -> None:
    check = quick_check(schema)
    if check is not None and check(value):
        assert SafeValidator(schema, registry=NO_RETRIEVAL).is_valid(value), (schema, value)


WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "A city", "minLength": 1},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "unit": {"type": "string", "enum": ["c", "f"]},
        "code": {"type": "string", "maxLength": 2},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "at": {"type": "object", "properties": {"lat": {"type": "number"}}},
    },
    "required": ["city"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    "arguments",
    [
        {"city": "Paris"},
        {"city": "Paris", "days": 3, "unit": "c", "tags": ["x"], "at": {"lat": 48.8}},
        {"city": "Oslo", "at": {"lat": 60, "other": True}},
    ],
)
def test_the_common_schema_is_checked_at_once(arguments: dict[str, Any]) -> None:
    check = quick_check(WEATHER)
    assert check is not None
    assert check(arguments)


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({}, "'city' is a required property"),
        ({"city": "Paris", "days": 30}, "30 is greater than the maximum of 14"),
        ({"city": "Paris", "unit": "k"}, "'k' is not one of ['c', 'f']"),
        ({"city": "Paris", "wind": 1}, "Additional properties are not allowed"),
        ({"city": "Paris", "days": True}, "True is not of type 'integer'"),
        ({"city": "Paris", "days": 0}, "0 is less than the minimum of 1"),
        ({"city": ""}, "'' should be non-empty"),
        ({"city": "Paris", "tags": ["a", "b", "c", "d"]}, "is too long"),
        ({"city": "Paris", "tags": [1]}, "1 is not of type 'string'"),
        ({"city": "Paris", "code": "abc"}, "'abc' is too long"),
    ],
)
def test_what_the_quick_check_does_not_pass_jsonschema_explains(
    arguments: dict[str, Any], said: str
) -> None:
    check = quick_check(WEATHER)
    assert check is not None
    assert not check(arguments)
    with pytest.raises(ToolArgumentsInvalid, match="do not match the schema") as caught:
        ArgumentValidator(WEATHER).validate(arguments)
    assert said in str(caught.value)


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({"type": "string", "minimum": 1, "maximum": 2}, "abc"),
        ({"type": "integer", "minLength": 5, "maxLength": 0}, 3),
        ({"type": "boolean", "minimum": 1}, False),
    ],
)
def test_bounds_for_another_type_assert_nothing(schema: dict[str, Any], value: Any) -> None:
    """As in jsonschema: a number's bounds say nothing of a string, nor a string's of
    a number."""
    check = quick_check(schema)
    assert check is not None
    assert check(value)
    assert SafeValidator(schema, registry=NO_RETRIEVAL).is_valid(value)


def test_a_float_for_an_integer_is_left_to_jsonschema() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    check = quick_check(schema)
    assert check is not None
    assert not check({"n": 2.0})
    assert ArgumentValidator(schema).validate({"n": 2.0}) == {"n": 2.0}  # jsonschema's yes


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "^a"}}},
        {"type": "object", "properties": {"a": {"type": ["string", "null"]}}},
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}},
        {"type": "object", "patternProperties": {"^a": {"type": "string"}}},
        {"type": "object", "properties": {"a": True}},
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"type": "object", "properties": {"a": {"type": "integer", "enum": [1, 2]}}},
    ],
)
def test_a_schema_outside_what_it_reads_gets_no_quick_check(schema: dict[str, Any]) -> None:
    assert quick_check(schema) is None


def _wide(properties: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {f"p{i}": {"type": "string"} for i in range(properties)},
    }


def test_a_schema_of_more_subschemas_than_the_budget_gets_no_quick_check() -> None:
    """The object and its properties are MAX_NODES + 1 subschemas, however they nest:
    nothing is made for a schema that large, and jsonschema still checks its calls."""
    assert quick_check(_wide(MAX_NODES - 1)) is not None
    assert quick_check(_wide(MAX_NODES)) is None
    assert quick_check(_wide(4000)) is None
    over = {"type": "object", "properties": {f"p{i}": _wide(15) for i in range(16)}}
    assert quick_check(over) is None  # 1 + 16 * 16 nodes, no one object over
    within = {"type": "object", "properties": {f"p{i}": _wide(14) for i in range(16)}}
    assert quick_check(within) is not None  # 1 + 16 * 15
    validator = ArgumentValidator(_wide(4000))
    assert validator.validate({"p1": "x"}) == {"p1": "x"}
    with pytest.raises(ToolArgumentsInvalid):
        validator.validate({"p1": 1})
