"""Loading tool definitions from YAML files."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tool_registry.envsubst import substitute
from tool_registry.errors import MissingVariable, ToolConfigError
from tool_registry.spec import ToolSpec

from .files import ExpansionRefused, load_yaml, read_bounded


def format_location(loc: tuple[int | str, ...], prefix: str = "") -> str:
    """``("tools", 0, "http", "url")`` → ``tools[0].http.url``."""
    text = prefix
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text = f"{text}.{part}" if text else str(part)
    return text or "(root)"


def describe_validation_error(exc: ValidationError, prefix: str = "") -> str:
    """One line per problem: where it is and what is wrong."""
    lines = []
    for error in exc.errors(include_url=False, include_input=False):
        message = error["msg"].removeprefix("Value error, ")
        lines.append(f"{format_location(error['loc'], prefix)}: {message}")
    return "; ".join(lines)


def yaml_problem(exc: yaml.YAMLError) -> str:
    """What is wrong with a YAML text and where, without quoting it: the line a
    parser would show may hold a secret."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or type(exc).__name__
    if mark is None:
        return str(problem)
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"


def read_yaml(path: Path, env: Mapping[str, str] | None = None) -> Any:
    """Read a YAML file and substitute ``${VAR}`` from ``env`` (default ``os.environ``)."""
    data = read_bounded(path)  # a regular file, bounded (``files``)
    try:
        raw = load_yaml(data)  # aliases expanded under a budget
    except ExpansionRefused as exc:
        raise ToolConfigError(f"{path}: refused: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ToolConfigError(f"{path}: invalid YAML: {yaml_problem(exc)}") from exc
    except RecursionError as exc:
        raise ToolConfigError(f"{path}: the document nests too deep") from exc
    try:
        return substitute(raw, os.environ if env is None else env)
    except MissingVariable as exc:
        raise ToolConfigError(f"{path}: {exc.path}: {exc}") from exc


def load_tool_file(path: Path, env: Mapping[str, str] | None = None) -> list[ToolSpec]:
    """Tools from a YAML file holding a list of tools or a mapping with a ``tools`` list."""
    data = read_yaml(path, env)
    prefix = ""
    if isinstance(data, dict) and "tools" in data:
        data, prefix = data["tools"], "tools"
    if not isinstance(data, list):
        raise ToolConfigError(f"{path}: expected a list of tools or a mapping with 'tools'")
    specs = []
    for index, item in enumerate(data):
        try:
            specs.append(ToolSpec.model_validate(item))
        except ValidationError as exc:
            where = f"{prefix}[{index}]"
            raise ToolConfigError(f"{path}: {describe_validation_error(exc, where)}") from exc
    return specs
