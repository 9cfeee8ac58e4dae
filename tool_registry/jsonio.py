"""JSON on the hot path: orjson, with the standard library for what orjson refuses
(integers past 64 bits, non-string keys)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import orjson

T = TypeVar("T")

JSONDecodeError = json.JSONDecodeError  # orjson's decode error is a subclass

# orjson reads an integer past 64 bits as a float: another number. Such an integer
# has at least 19 digits.
_LONG_DIGITS = re.compile(r"\d{19}")
_LONG_DIGITS_BYTES = re.compile(rb"\d{19}")


def loads(data: bytes | str) -> Any:
    return orjson.loads(data)


def _no_constants(name: str) -> Any:
    raise JSONDecodeError(f"{name} is not a JSON value", name, 0)


def loads_exact(data: bytes | str) -> Any:
    """JSON with every integer kept digit for digit (what a model or a tool wrote
    goes on as written). orjson parses; where the text holds a run of 19 or more
    digits the standard library parses again, still refusing ``NaN`` and ``Infinity``
    as orjson does."""
    value = orjson.loads(data)
    pattern = _LONG_DIGITS_BYTES if isinstance(data, bytes) else _LONG_DIGITS
    if pattern.search(data) is None:  # type: ignore[arg-type]
        return value
    return json.loads(data, parse_constant=_no_constants)


def loads_object(data: bytes | str) -> dict[str, Any] | None:
    """A JSON object, or None for anything else (invalid JSON included)."""
    try:
        value = orjson.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def dumps_text(value: Any) -> str:
    return dumps(value).decode()


def canonical(value: Any) -> str:
    """Compact JSON with sorted keys: the same value always gives the same text."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def dumps_each(items: Iterable[T], encode: Callable[[T], Any]) -> bytes:
    """A JSON array of ``encode(item)`` for each item, written one item at a time: a long
    list's encoded objects are never all held at once, beside the list itself."""
    out = bytearray(b"[")
    for index, item in enumerate(items):
        if index:
            out += b","
        out += dumps(encode(item))
    out += b"]"
    return bytes(out)
