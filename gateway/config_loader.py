"""Loading and validating the configuration file: fail fast, naming file, path and reason."""

from __future__ import annotations

import fnmatch
import hashlib
from collections import Counter, defaultdict
from collections.abc import Mapping
from pathlib import Path

from pydantic import ValidationError

from tool_registry import ToolConfigError, ToolSpec, load_tool_file
from tool_registry.loader import describe_validation_error, read_yaml

from .config import GatewayConfig
from .errors import ConfigError


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
        files = sorted(path.parent.glob(pattern))
        if not files:
            raise ConfigError(f"{path}: tool_files[{index}]: {pattern!r} matches no file")
        for file in files:
            try:
                specs = load_tool_file(file, env)
            except ToolConfigError as exc:
                raise ConfigError(str(exc)) from exc
            origins += [f"{file}: [{i}]" for i in range(len(specs))]
            extra += specs
    if extra:
        config = config.model_copy(update={"tools": [*config.tools, *extra]})

    problems = _duplicate_tools(config.tools, origins) + check_references(config)
    if problems:
        raise ConfigError(f"{path}: " + "; ".join(problems))
    return config


def _duplicate_tools(tools: list[ToolSpec], origins: list[str]) -> list[str]:
    first: dict[str, str] = {}
    problems = []
    for spec, origin in zip(tools, origins, strict=True):
        if spec.name in first:
            problems.append(f"duplicate tool name {spec.name!r} ({first[spec.name]} and {origin})")
        else:
            first[spec.name] = origin
    return problems


def _duplicates(names: list[str]) -> list[str]:
    return [name for name, count in Counter(names).items() if count > 1]


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def check_references(config: GatewayConfig) -> list[str]:
    """Every cross-reference problem of a configuration (pure: no I/O)."""
    problems = [
        f"upstreams: duplicate name {n!r}" for n in _duplicates([u.name for u in config.upstreams])
    ]
    problems += [
        f"models: duplicate name {n!r}" for n in _duplicates([m.name for m in config.models])
    ]
    upstreams = {u.name for u in config.upstreams}
    for i, model in enumerate(config.models):
        if model.upstream not in upstreams:
            problems.append(f"models[{i}].upstream: unknown upstream {model.upstream!r}")

    model_names = [m.name for m in config.models]
    tool_names = [t.name for t in config.tools]
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
            if not fnmatch.filter(tool_names, pattern):
                problems.append(f"{where}.tools[{j}]: {pattern!r} matches no tool")
    problems += [
        f"tenants: one key is configured more than once (tenants {', '.join(sorted(set(ids)))})"
        for ids in holders.values()
        if len(ids) > 1
    ]
    problems += [
        f"tenants: duplicate id {n!r}" for n in _duplicates([t.id for t in config.tenants or []])
    ]
    return problems
