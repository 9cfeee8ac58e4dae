"""The registry: every source's tools under one namespace, with one validation.

It owns naming (``tool_name``: imported names made valid and shortened to 64
characters with a stable hash), duplicate detection naming both origins, and the
check that every model-visible schema is valid JSON Schema.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from collections.abc import Iterable, Iterator

from .definition import ToolDefinition
from .errors import ToolConfigError
from .tool import Tool

MAX_NAME = 64
_INVALID = re.compile(r"[^a-zA-Z0-9_-]+")
_VALID_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_HASH_CHARS = 8
_DEFINITIONS_KEPT = 1024  # distinct tool sets (tenants by narrowings) remembered


def tool_name(prefix: str, name: str) -> str:
    """The registry name of an imported tool: ``prefix`` + ``name`` with every run of
    characters OpenAI refuses turned into ``_``; over 64 characters, cut and ended with
    ``_`` and a hash of the whole imported name, so the same name always maps the same
    way and two long names that share a beginning stay apart."""
    wanted = _INVALID.sub("_", prefix + name) or "_"
    if len(wanted) <= MAX_NAME:
        return wanted
    digest = hashlib.sha256((prefix + name).encode()).hexdigest()[:_HASH_CHARS]
    return f"{wanted[: MAX_NAME - _HASH_CHARS - 1]}_{digest}"


class ToolRegistry:
    """Every tool, by name. Immutable: a changed tool list is a new registry."""

    def __init__(self, tools: Iterable[Tool], *, discovered: Iterable[Tool] = ()) -> None:
        """A duplicate name or invalid schema among ``tools`` raises ``ToolConfigError``
        naming every problem. Among ``discovered`` tools (found at run time, from a
        server's list) the first of a name is kept and the rest are in ``problems``."""
        found: dict[str, Tool] = {}
        problems: list[str] = []
        for tool in tools:
            problem = self._problem(tool, found)
            if problem is None:
                found[tool.name] = tool
            else:
                problems.append(problem)
        if problems:
            raise ToolConfigError("; ".join(problems))
        for tool in discovered:
            problem = self._problem(tool, found)
            if problem is None:
                found[tool.name] = tool
            else:
                problems.append(f"left out: {problem}")
        self._tools = found
        self.problems = problems
        self._definitions: dict[tuple[str, ...], tuple[ToolDefinition, ...]] = {}
        self.bound_headers = tuple(
            sorted(
                {
                    source[len("header.") :].lower()
                    for tool in found.values()
                    for sources in tool.bind_sources.values()
                    for source in sources
                    if source.startswith("header.")
                }
            )
        )  # every request header some tool binds (lower-case, sorted): the caller's identity

    @staticmethod
    def _problem(tool: Tool, found: dict[str, Tool]) -> str | None:
        if not _VALID_NAME.match(tool.name):
            return f"{tool.origin}: tool name {tool.name!r} is not valid"
        first = found.get(tool.name)
        if first is not None:
            return f"duplicate tool name {tool.name!r} ({first.origin} and {tool.origin})"
        problem = tool.schema_problem
        return f"{tool.origin}: {problem}" if problem is not None else None

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def match(self, pattern: str) -> list[str]:
        """Names matching a glob pattern (``*``, ``?``, ``[…]``), in registry order."""
        return [name for name in self._tools if fnmatch.fnmatchcase(name, pattern)]

    def definitions(self, names: tuple[str, ...]) -> tuple[ToolDefinition, ...]:
        """The model-visible definitions of ``names``, worked out once per distinct set."""
        found = self._definitions.get(names)
        if found is None:
            if len(self._definitions) >= _DEFINITIONS_KEPT:
                self._definitions.clear()
            found = tuple(t.definition for n in names if (t := self._tools.get(n)) is not None)
            self._definitions[names] = found
        return found
