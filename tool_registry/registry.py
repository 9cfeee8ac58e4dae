"""The registry: tool definitions compiled for use, looked up by name."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .arguments import ArgumentValidator, canonical_arguments, parse_arguments, visible_parameters
from .errors import ToolArgumentsInvalid, ToolConfigError
from .request_builder import RequestTemplate
from .spec import ToolSpec
from .templates import MissingValue, placeholders, render

SAFE_METHODS = frozenset({"GET", "HEAD"})  # methods that change nothing


@dataclass(frozen=True, slots=True)
class CallContext:
    """What the gateway knows about the request a call belongs to, for ``bind``."""

    tenant_id: str
    headers: Mapping[str, str] = field(default_factory=dict)  # lower-case names

    def values(self, names: Iterable[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        for name in names:
            if name == "tenant.id":
                found[name] = self.tenant_id
            elif name.startswith("header."):
                value = self.headers.get(name[len("header.") :].lower())
                if value is not None:
                    found[name] = value
        return found


@dataclass(frozen=True, slots=True)
class PreparedCall:
    """A call whose arguments are parsed, validated and bound: ready to execute."""

    tool: Tool
    arguments: dict[str, Any]

    @property
    def key(self) -> str:
        """Identifies the same call made twice: the name and canonical arguments."""
        return f"{self.tool.name}:{canonical_arguments(self.arguments)}"


class Tool:
    """A tool ready for use: its OpenAI definition and its argument handling."""

    __slots__ = ("_bound", "_validator", "bind_sources", "definition", "request", "spec")

    def __init__(self, spec: ToolSpec) -> None:
        self.spec = spec
        self.request = RequestTemplate(spec.http)
        self._validator = ArgumentValidator(spec.parameters)
        self.bind_sources = {key: placeholders(t) for key, t in spec.bind.items()}
        self._bound = frozenset(spec.bind)
        function: dict[str, Any] = {
            "name": spec.name,
            "parameters": visible_parameters(spec.parameters, set(spec.bind)),
        }
        if spec.description:
            function["description"] = spec.description
        self.definition: dict[str, Any] = {"type": "function", "function": function}

    @property
    def name(self) -> str:
        return self.spec.name

    # What the gateway asks of a tool, whatever its source: never its HTTP spec.

    @property
    def side_effects(self) -> bool:
        """Whether calling it may change something (a replayed request must not)."""
        return self.spec.http.method not in SAFE_METHODS

    @property
    def cache_ttl_s(self) -> float | None:
        """How long a successful result may be reused, if at all."""
        return self.spec.cache_ttl_s

    @property
    def header_bound(self) -> frozenset[str]:
        """Arguments whose values come from request headers: never shown in traces."""
        return frozenset(k for k, t in self.spec.bind.items() if "{header." in t)

    def prepare(self, raw_arguments: str | None, context: CallContext) -> PreparedCall:
        """Parse, bind and validate the model's arguments; raise ``ToolArgumentsInvalid``."""
        arguments = parse_arguments(raw_arguments)
        for key in self.spec.bind:
            arguments.pop(key, None)  # bound values win over anything the model sends
        for key, template in self.spec.bind.items():
            values = context.values(self.bind_sources[key])
            try:
                arguments[key] = render(template, values)
            except MissingValue as exc:
                raise ToolArgumentsInvalid(
                    f"this tool needs the request header {exc.name[len('header.') :]!r}, "
                    "which the client did not send"
                ) from exc
        return PreparedCall(self, self._validator.validate(arguments, self._bound))


class ToolRegistry:
    """Every configured tool, by name."""

    def __init__(self, specs: Iterable[ToolSpec]) -> None:
        tools: dict[str, Tool] = {}
        for spec in specs:
            if spec.name in tools:
                raise ToolConfigError(f"duplicate tool name {spec.name!r}")
            tools[spec.name] = Tool(spec)
        self._tools = tools

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    @property
    def bound_headers(self) -> frozenset[str]:
        """Every request header some tool binds (lower-case): the caller's identity."""
        return frozenset(
            source[len("header.") :].lower()
            for tool in self._tools.values()
            for sources in tool.bind_sources.values()
            for source in sources
            if source.startswith("header.")
        )

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def match(self, pattern: str) -> list[str]:
        """Names matching a glob pattern (``*``, ``?``, ``[…]``), in registry order."""
        return [name for name in self._tools if fnmatch.fnmatchcase(name, pattern)]
