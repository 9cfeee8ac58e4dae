"""``{name}`` templates used in tool URLs, query strings, headers and bindings."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from .errors import MissingValue

_PLACEHOLDER = re.compile(r"\{([^{}]+)\}")


def placeholders(template: str) -> list[str]:
    """The names a template refers to, in order of appearance."""
    return _PLACEHOLDER.findall(template)


def stringify(value: Any) -> str:
    """The text form of an argument value in a URL or header."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return str(value)


def render(
    template: str,
    values: Mapping[str, Any],
    encode: Callable[[str], str] | None = None,
) -> str:
    """Fill ``template`` from ``values``; ``encode`` is applied to each filled value."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise MissingValue(name)
        text = stringify(values[name])
        return encode(text) if encode else text

    return _PLACEHOLDER.sub(replace, template)
