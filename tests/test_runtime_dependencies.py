"""Everything the gateway imports is installed by ``pip install .`` (``make run``), not
only by the dev extras that ``make test`` installs: ``mcp`` once came in only through
``openai-agents`` and ``make run`` failed on a fresh clone."""

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


def imported_modules() -> dict[str, str]:
    """Top-level third-party modules the packages import → a file importing each."""
    found: dict[str, str] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in PACKAGES:
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
