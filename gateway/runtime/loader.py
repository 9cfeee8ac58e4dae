"""Loading and validating the configuration file: fail fast, naming file, path and reason."""

from __future__ import annotations

import fnmatch
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gateway.config import GatewayConfig
from gateway.errors import ConfigError
from gateway.policy.tenants import key_digest
from gateway.runtime.tool_sources import could_match_later, deferred_prefixes, static_tools
from tool_registry import (
    OpenApiSource,
    ToolConfigError,
    ToolRegistry,
    ToolSpec,
    describe_validation_error,
    load_tool_file,
    read_yaml,
)


def load_config(path: Path | str, env: Mapping[str, str] | None = None) -> GatewayConfig:
    """Read, interpolate and validate a configuration file; raise ``ConfigError``."""
    path = Path(path)
    try:
        data = read_yaml(path, env)
    except ToolConfigError as exc:
        raise ConfigError(str(exc)) from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    try:
        config = GatewayConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {describe_validation_error(exc)}") from exc

    origins = [f"{path}: tools[{i}]" for i in range(len(config.tools))]
    extra: list[ToolSpec] = []
    for index, pattern in enumerate(config.tool_files):
        files = tool_files(path, pattern)
        if not files:
            raise ConfigError(f"{path}: tool_files[{index}]: {pattern!r} matches no file")
        for file in files:
            try:
                specs = load_tool_file(file, env)
            except ToolConfigError as exc:
                raise ConfigError(str(exc)) from exc
            origins += [f"{file}: [{i}]" for i in range(len(specs))]
            extra += specs
    update: dict[str, Any] = {}
    if extra:
        update["tools"] = [*config.tools, *extra]
    if config.openapi:
        update["openapi"] = [_located(path, i, s) for i, s in enumerate(config.openapi)]
    if update:
        config = config.model_copy(update=update)
    config._tool_origins = origins

    try:
        registry = ToolRegistry(static_tools(config).tools)
    except ToolConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    problems = check_references(config, registry.names)
    if problems:
        raise ConfigError(f"{path}: " + "; ".join(problems))
    return config


def tool_files(path: Path, pattern: str) -> list[Path]:
    """The files a ``tool_files`` pattern of the configuration file ``path`` takes in:
    beside it (or where an absolute pattern says), in name order. A pattern no glob
    takes is a ConfigError naming it."""
    given = Path(pattern)
    try:
        if given.is_absolute():
            return sorted(Path(given.anchor).glob(str(given.relative_to(given.anchor))))
        return sorted(path.parent.glob(pattern))
    except (ValueError, NotImplementedError) as exc:
        raise ConfigError(f"{path}: tool_files pattern {pattern!r} cannot be used: {exc}") from exc


def _located(path: Path, index: int, source: OpenApiSource) -> OpenApiSource:
    """An OpenAPI source with its file found: beside the configuration file, else from
    the working directory."""
    if source.is_url:
        return source
    spec = Path(source.spec)
    for candidate in (path.parent / spec, spec):
        if candidate.is_file():
            return source.model_copy(update={"spec": str(candidate.resolve())})
    raise ConfigError(
        f"{path}: openapi[{index}].spec: no file {source.spec!r} "
        f"(looked beside the configuration file and in {Path.cwd()})"
    )


def _duplicates(names: list[str]) -> list[str]:
    return [name for name, count in Counter(names).items() if count > 1]


def check_references(config: GatewayConfig, tool_names: Sequence[str] | None = None) -> list[str]:
    """Every cross-reference problem of a configuration (pure: no I/O). ``tool_names``:
    the tools the sources read so far (default: the inline ones); an allowlist pattern
    that only a source read at start-up (an OpenAPI URL, an MCP server) can match is
    not a problem here."""
    problems = [
        f"upstreams: duplicate name {n!r}" for n in _duplicates([u.name for u in config.upstreams])
    ]
    problems += [
        f"models: duplicate name {n!r}" for n in _duplicates([m.name for m in config.models])
    ]
    problems += [
        f"mcp: duplicate server name {n!r}" for n in _duplicates([s.name for s in config.mcp])
    ]
    upstreams = {u.name for u in config.upstreams}
    for i, model in enumerate(config.models):
        if model.upstream not in upstreams:
            problems.append(f"models[{i}].upstream: unknown upstream {model.upstream!r}")

    model_names = [m.name for m in config.models]
    if tool_names is None:
        tool_names = [t.name for t in config.tools]
    later = deferred_prefixes(config)
    holders: dict[str, list[str]] = defaultdict(list)
    for i, tenant in enumerate(config.tenants or []):
        where = f"tenants[{i}]"
        digests = [key_digest(k.get_secret_value()) for k in tenant.keys] + tenant.key_sha256
        if not digests:
            problems.append(f"{where}: tenant {tenant.id!r} has no keys or key_sha256")
        for digest in digests:
            holders[digest].append(tenant.id)
        for j, pattern in enumerate(tenant.models):
            if not fnmatch.filter(model_names, pattern):
                problems.append(f"{where}.models[{j}]: {pattern!r} matches no model")
        for j, pattern in enumerate(tenant.tools):
            if not fnmatch.filter(tool_names, pattern) and not could_match_later(pattern, later):
                problems.append(f"{where}.tools[{j}]: {pattern!r} matches no tool")
    problems += [
        f"tenants: one key is configured more than once (tenants {', '.join(sorted(set(ids)))})"
        for ids in holders.values()
        if len(ids) > 1
    ]
    problems += [
        f"tenants: duplicate id {n!r}" for n in _duplicates([t.id for t in config.tenants or []])
    ]
    recording = [config.recordings.record] + [t.record for t in config.tenants or []]
    if not config.traces.enabled and any(r not in (None, "off", 0) for r in recording):
        problems.append("recordings are kept with traces: traces.enabled must be true")
    return problems
