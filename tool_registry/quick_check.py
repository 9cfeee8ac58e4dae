"""A quick yes for a model's arguments (docs/performance.md, "A call's arguments,
checked at once").

jsonschema walks a schema keyword by keyword through Python calls: a tool call of
three arguments took about 40 µs to check here. Most tools' schemas are an object of
named, typed properties — some required, perhaps no others allowed, a string's enum,
a number's bounds, a list's items — and for those ``quick_check`` makes a plain
function of the schema, once per tool. It answers only *yes, valid* or *don't know*:
on a yes the arguments are valid for jsonschema too (a property test holds the two
together), and on anything else — an invalid value, a float where an integer is asked
for, a keyword outside these — the caller asks jsonschema, whose errors are the ones
the model reads. A schema with any keyword outside these gets no quick check at all,
and nor does one of more than ``MAX_NODES`` subschemas: what it would make costs time and
memory in proportion (a listing's 4,000-property schema made 4,000 functions, and the
collection they set off paused every thread), for a tool too large to be a common one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Check = Callable[[Any], bool]

MAX_NODES = 256  # the most subschemas a quick check is made of

# Keywords that assert nothing (annotations; ``format`` asserts only with a format
# checker, which the validator has none of).
_NOTES = frozenset(
    {"description", "title", "default", "examples", "$comment", "format", "deprecated"}
)
_SCALAR_KEYS = _NOTES | {"type", "enum", "minimum", "maximum", "minLength", "maxLength"}
_OBJECT_KEYS = _NOTES | {"type", "properties", "required", "additionalProperties"}
_ARRAY_KEYS = _NOTES | {"type", "items", "minItems", "maxItems"}

# Exactly the values each type names (a bool is no integer or number here; a float
# with an integral value is left to jsonschema).
_TYPES: dict[str, Check] = {
    "string": lambda v: type(v) is str,
    "integer": lambda v: type(v) is int,
    "number": lambda v: type(v) is int or type(v) is float,
    "boolean": lambda v: type(v) is bool,
    "null": lambda v: v is None,
}


def quick_check(schema: Any) -> Check | None:
    """A check of ``schema`` that says True only for what it accepts, or None when the
    schema is not one it can read."""
    return _compile(schema, 0, _Budget())


class _Budget:
    """The subschemas a check may still be made of."""

    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = MAX_NODES

    def spend(self, nodes: int) -> bool:
        self.left -= nodes
        return self.left >= 0


def _compile(schema: Any, depth: int, budget: _Budget) -> Check | None:
    if not isinstance(schema, dict) or depth > 8 or not budget.spend(1):
        return None
    kind = schema.get("type")
    if kind == "object":
        return _object(schema, depth, budget)
    if kind == "array":
        return _array(schema, depth, budget)
    if isinstance(kind, str) and kind in _TYPES:
        return _scalar(schema, kind)
    return None


def _object(schema: Mapping[str, Any], depth: int, budget: _Budget) -> Check | None:
    if not schema.keys() <= _OBJECT_KEYS:
        return None
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if not isinstance(properties, dict) or not isinstance(required, list):
        return None
    if len(properties) > budget.left:  # over budget before making anything
        return None
    if not all(isinstance(name, str) for name in required) or not isinstance(extra, bool):
        return None
    checks: dict[str, Check] = {}
    for name, inner in properties.items():
        each = _compile(inner, depth + 1, budget)
        if each is None:
            return None
        checks[name] = each
    needed = tuple(required)
    closed = not extra

    def check(value: Any) -> bool:
        if type(value) is not dict:
            return False
        for name in needed:
            if name not in value:
                return False
        for name, item in value.items():
            inner = checks.get(name)
            if inner is None:
                if closed:
                    return False
            elif not inner(item):
                return False
        return True

    return check


def _array(schema: Mapping[str, Any], depth: int, budget: _Budget) -> Check | None:
    if not schema.keys() <= _ARRAY_KEYS:
        return None
    items = schema.get("items")
    each = _compile(items, depth + 1, budget) if items is not None else None
    if items is not None and each is None:
        return None
    least, most = schema.get("minItems", 0), schema.get("maxItems")
    if type(least) is not int or (most is not None and type(most) is not int):
        return None

    def check(value: Any) -> bool:
        if type(value) is not list or len(value) < least:
            return False
        if most is not None and len(value) > most:
            return False
        return each is None or all(each(item) for item in value)

    return check


def _scalar(schema: Mapping[str, Any], kind: str) -> Check | None:
    if not schema.keys() <= _SCALAR_KEYS:
        return None
    typed = _TYPES[kind]
    enum = schema.get("enum")
    if enum is not None and (not isinstance(enum, list) or not all(type(v) is str for v in enum)):
        return None  # only an enum of strings is read here
    allowed = frozenset(enum) if enum is not None else None
    low, high = schema.get("minimum"), schema.get("maximum")
    shortest, longest = schema.get("minLength"), schema.get("maxLength")
    for bound in (low, high):
        if bound is not None and type(bound) not in (int, float):
            return None
    for length in (shortest, longest):
        if length is not None and type(length) is not int:
            return None
    if kind not in ("integer", "number"):  # bounds that jsonschema reads of numbers only
        low = high = None
    if kind != "string":  # and of strings only
        shortest = longest = None

    def check(value: Any) -> bool:
        if not typed(value):
            return False
        if allowed is not None and (type(value) is not str or value not in allowed):
            return False
        if low is not None and value < low:
            return False
        if high is not None and value > high:
            return False
        if shortest is not None and len(value) < shortest:
            return False
        return longest is None or len(value) <= longest

    return check
