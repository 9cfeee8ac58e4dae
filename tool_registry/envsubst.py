"""``${VAR}`` and ``${VAR:-default}`` substitution in configuration values."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .errors import MissingVariable

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")


def substitute(value: Any, env: Mapping[str, str], path: str = "") -> Any:
    """Return ``value`` with every ``${VAR}`` in its strings replaced from ``env``.

    Walks dicts and lists; ``path`` is the location used in error messages.
    """
    if isinstance(value, str):
        return _substitute_string(value, env, path)
    if isinstance(value, dict):
        return {k: substitute(v, env, _join(path, str(k))) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, env, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def _substitute_string(text: str, env: Mapping[str, str], path: str) -> str:
    if "${" not in text:
        return text

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        found = env.get(name)
        if found is not None and (found != "" or default is None):
            return found
        if default is not None:
            return default
        raise MissingVariable(name, path)

    return _VAR.sub(replace, text)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
