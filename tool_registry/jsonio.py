"""JSON on the hot path: orjson, with the standard library for what orjson refuses
(integers past 64 bits, non-string keys)."""

from __future__ import annotations

import json
from typing import Any

import orjson

JSONDecodeError = json.JSONDecodeError  # orjson's decode error is a subclass


def loads(data: bytes | str) -> Any:
    return orjson.loads(data)


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
