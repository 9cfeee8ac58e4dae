"""The configured tool sources, read into tools (docs/design.md §12).

``static_tools`` reads what needs no network: inline tools, tool files (merged by the
loader) and OpenAPI documents on disk. OpenAPI documents at URLs and MCP servers are
the running sources of ``remote_sources``.
Problems that leave one operation out are warnings; a source that cannot be used at
all is a ``ToolConfigError``.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

from gateway.config import GatewayConfig
from tool_registry import (
    HttpTool,
    OpenApiSource,
    Tool,
    openapi_tools,
    parse_document,
    read_bounded,
)


@dataclass
class SourcedTools:
    tools: list[Tool] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def add(self, source: OpenApiSource, document: object, where: str) -> None:
        found = openapi_tools(document, source, where)
        self.tools += found.tools
        self.warnings += [f"{where}: left out {skipped}" for skipped in found.skipped]


def read_document(path: Path) -> object:
    return parse_document(read_bounded(path), str(path))


def static_tools(config: GatewayConfig) -> SourcedTools:
    """Inline and file tools, and the operations of OpenAPI documents on disk."""
    found = SourcedTools(
        [HttpTool(spec, origin=config.tool_origin(i)) for i, spec in enumerate(config.tools)]
    )
    for source in config.openapi:
        if not source.is_url:
            found.add(source, read_document(Path(source.spec)), source.spec)
    return found


def deferred_prefixes(config: GatewayConfig) -> list[str]:
    """The name prefixes of sources whose tools are known only once the gateway runs."""
    return [s.prefix for s in config.openapi if s.is_url] + [s.prefix for s in config.mcp]


def could_match_later(pattern: str, prefixes: list[str]) -> bool:
    """Whether an allowlist pattern may name tools a running source will bring."""
    return any(not p or pattern.startswith(p) or fnmatch.fnmatchcase(p, pattern) for p in prefixes)
