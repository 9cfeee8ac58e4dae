"""Everything the gateway imports is declared by ``pip install .`` (``make run``), not
only by the dev extras that ``make test`` installs (``mcp`` once came in only through
``openai-agents`` and ``make run`` failed on a fresh clone), and declared directly, not
only brought by another distribution (eight were: aiohttp, yarl, multidict, numpy,
referencing, httpx2, httpcore2, mcp-types). What the tests and the bench import is
declared by the dev extras. A distribution whose internals the code overrides has an
upper bound."""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, packages_distributions, requires
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("gateway", "tool_registry")
OURS = (*PACKAGES, "tests", "bench", "scripts")


def runtime_closure() -> set[str]:
    """The distributions ``pip install .`` brings: the declared dependencies (for this
    platform, no extras) and theirs, transitively."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pending = [Requirement(text) for text in project["dependencies"]]
    found: set[str] = set()
    while pending:
        requirement = pending.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(requirement.name)
        if name in found:
            continue
        found.add(name)
        try:
            pending += [Requirement(text) for text in requires(requirement.name) or []]
        except PackageNotFoundError:
            continue
    return found


def declared(*extras: str) -> set[str]:
    """The distributions ``pyproject.toml`` names itself (with ``extras``' too)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    texts = list(project["dependencies"])
    for extra in extras:
        texts += project["optional-dependencies"][extra]
    return {canonicalize_name(Requirement(text).name) for text in texts}


def imported_modules(folders: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """Top-level third-party modules the folders import → a file importing each."""
    found: dict[str, str] = {}
    for package in folders:
        for path in (ROOT / package).rglob("*.py"):
            if "node_modules" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in OURS:
                        found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def test_every_import_comes_with_the_runtime_dependencies() -> None:
    closure = runtime_closure()
    providers = packages_distributions()
    imported = imported_modules()
    assert "mcp" in imported  # the check sees the imports it is about
    missing = {
        module: where
        for module, where in imported.items()
        if not any(canonicalize_name(d) in closure for d in providers.get(module, []))
    }
    assert missing == {}, f"imported but not a runtime dependency: {missing}"


def _undeclared(imported: dict[str, str], names: set[str]) -> dict[str, str]:
    providers = packages_distributions()
    return {
        module: where
        for module, where in imported.items()
        if not any(canonicalize_name(d) in names for d in providers.get(module, [module]))
    }


def test_every_import_of_the_packages_is_declared_directly() -> None:
    imported = imported_modules()
    assert "aiohttp" in imported  # the check sees the imports it is about
    missing = _undeclared(imported, declared())
    assert missing == {}, f"imported but not declared in dependencies: {missing}"


def test_every_import_of_the_tests_and_the_bench_is_declared() -> None:
    imported = imported_modules(("tests", "bench"))
    assert "hypothesis" in imported
    missing = _undeclared(imported, declared("dev", "otlp-grpc"))
    assert missing == {}, f"imported but not declared (dependencies or dev): {missing}"


# Distributions whose internals the code overrides, and where.
OVERRIDDEN = {
    "uvicorn": "gateway/cli/protocol.py (EnvelopeHttpToolsProtocol)",
    "httptools": "gateway/cli/protocol.py (a parser made again)",
}


def test_what_the_code_overrides_is_bounded_above() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = {canonicalize_name(r.name): r for r in map(Requirement, project["dependencies"])}
    for name, where in OVERRIDDEN.items():
        bounds = [spec.operator for spec in requirements[canonicalize_name(name)].specifier]
        assert "<" in bounds, f"{name}'s internals are overridden in {where}: bound it above"
