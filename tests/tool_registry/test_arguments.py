from __future__ import annotations

from typing import Any

import pytest

from tool_registry.arguments import (
    ArgumentValidator,
    canonical_arguments,
    coerce,
    parse_arguments,
    visible_parameters,
)
from tool_registry.errors import ToolArgumentsInvalid


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("", {}),
        (None, {}),
        ("  ", {}),
        ('{"a": 1}', {"a": 1}),
        ('{"a": {"b": [1]}}', {"a": {"b": [1]}}),
    ],
)
def test_parse_arguments(raw: str | None, expected: dict[str, Any]) -> None:
    assert parse_arguments(raw) == expected


@pytest.mark.parametrize(
    ("raw", "message"),
    [("{bad", "not valid JSON"), ("[1, 2]", "must be a JSON object"), ('"x"', "JSON object")],
)
def test_parse_arguments_refuses(raw: str, message: str) -> None:
    with pytest.raises(ToolArgumentsInvalid, match=message):
        parse_arguments(raw)


@pytest.mark.parametrize(
    ("value", "schema", "expected"),
    [
        ("5", {"type": "integer"}, 5),
        ("-12", {"type": "integer"}, -12),
        ("5.5", {"type": "integer"}, "5.5"),  # not an integer: left for the validator
        ("5.5", {"type": "number"}, 5.5),
        ("5", {"type": "number"}, 5),
        ("true", {"type": "boolean"}, True),
        ("False", {"type": "boolean"}, False),
        ("yes", {"type": "boolean"}, "yes"),
        ("5", {"type": ["string", "integer"]}, "5"),  # ambiguous: untouched
        ("5", {"type": ["integer", "null"]}, 5),
        ("5", {}, "5"),
        (5, {"type": "string"}, 5),
        (
            {"n": "3", "s": "3"},
            {"properties": {"n": {"type": "integer"}, "s": {"type": "string"}}},
            {"n": 3, "s": "3"},
        ),
        (["1", "2"], {"type": "array", "items": {"type": "integer"}}, [1, 2]),
        (
            {"deep": {"x": "1.5"}},
            {"properties": {"deep": {"properties": {"x": {"type": "number"}}}}},
            {"deep": {"x": 1.5}},
        ),
    ],
)
def test_coerce(value: Any, schema: dict[str, Any], expected: Any) -> None:
    assert coerce(value, schema) == expected


SCHEMA = {
    "type": "object",
    "properties": {
        "a": {"type": "number"},
        "b": {"type": "number"},
        "mode": {"enum": ["x", "y"]},
    },
    "required": ["a", "b"],
    "additionalProperties": False,
}


def test_validator_coerces_and_accepts() -> None:
    assert ArgumentValidator(SCHEMA).validate({"a": "1", "b": 2.5}) == {"a": 1, "b": 2.5}


@pytest.mark.parametrize(
    ("arguments", "fragments"),
    [
        ({"a": 1}, ["'b' is a required property"]),
        ({"a": "one", "b": 2}, ["$.a", "is not of type 'number'"]),
        ({"a": 1, "b": 2, "mode": "z"}, ["$.mode", "is not one of"]),
        ({"a": 1, "b": 2, "c": 3}, ["Additional properties are not allowed"]),
        ({"a": "x", "b": "y", "mode": "z", "c": 1}, ["(and 1 more)"]),
    ],
)
def test_validator_names_the_problem(arguments: dict[str, Any], fragments: list[str]) -> None:
    with pytest.raises(ToolArgumentsInvalid) as caught:
        ArgumentValidator(SCHEMA).validate(arguments)
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_visible_parameters_hide_bound_properties() -> None:
    schema = {
        "type": "object",
        "properties": {"q": {"type": "string"}, "tenant": {"type": "string"}},
        "required": ["q", "tenant"],
    }
    visible = visible_parameters(schema, {"tenant"})
    assert visible == {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    assert schema["required"] == ["q", "tenant"]  # the original is untouched
    assert visible_parameters(schema, set()) is schema


def test_canonical_arguments_ignore_key_order() -> None:
    assert canonical_arguments({"b": 1, "a": [2]}) == canonical_arguments({"a": [2], "b": 1})
    assert canonical_arguments({"a": 1}) != canonical_arguments({"a": 1.5})
