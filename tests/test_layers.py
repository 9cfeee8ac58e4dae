"""The package's folders are its layers (docs/design.md §1): each module imports only its
own layer and the ones below. Read from the source with ``ast``: nothing is imported,
and an import under ``TYPE_CHECKING`` counts like any other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Top to bottom. A module may import its own layer and any layer after it.
LAYERS = (
    "cli",
    "app",
    "surfaces",
    "runtime",
    "engine",
    "policy",
    "store",
    "upstream",
    "ops",
    "base",
)
# The ground floor, the one list of it (bench/trip.py reads it; docs/architecture.md
# names it): the typed values, the error tree, the configuration's models (a folder),
# and two helpers every layer uses.
BASE_MODULES = ("gateway.values", "gateway.errors", "gateway.digits", "gateway.chat_json")
BASE_FOLDERS = ("gateway.config",)
APP = {"gateway", "gateway.app"}
# Surfaces that stand beside each other, not on each other.
SIBLINGS = (
    ("gateway.surfaces.chat", "gateway.surfaces.responses"),
    ("gateway.surfaces.chat", "gateway.surfaces.messages"),
    ("gateway.surfaces.responses", "gateway.surfaces.messages"),
    ("gateway.surfaces.chat", "gateway.surfaces.ollama"),
    ("gateway.surfaces.responses", "gateway.surfaces.ollama"),
    ("gateway.surfaces.messages", "gateway.surfaces.ollama"),
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def in_base(module: str) -> bool:
    return module in BASE_MODULES or any(
        module == folder or module.startswith(f"{folder}.") for folder in BASE_FOLDERS
    )


def layer_of(module: str) -> str:
    if in_base(module):
        return "base"
    if module in APP:
        return "app"
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in LAYERS:
        return parts[1]
    raise AssertionError(f"{module} stands in no layer: put it in one of {LAYERS}")


def imports_of(path: Path) -> set[str]:
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    return imports_in(path.read_text(), package)


def imports_in(source: str, package: str) -> set[str]:
    """Every module of the tree that ``source`` (a module of ``package``) imports;
    ``from pkg import module`` is named as the module when it is one."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.add(target)
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                if _exists(candidate):
                    found.add(candidate)
    return {name for name in found if name.split(".")[0] in ("gateway", "tool_registry")}


def _exists(module: str) -> bool:
    path = ROOT.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def gateway_modules() -> list[Path]:
    return sorted((ROOT / "gateway").rglob("*.py"))


def wrong_way(module: str, imports: set[str]) -> list[str]:
    """The imports of ``module`` that climb to a layer above its own, or cross to a
    sibling surface."""
    rank = LAYERS.index(layer_of(module))
    found = []
    for target in sorted(imports):
        if not target.startswith("gateway"):
            continue
        if LAYERS.index(layer_of(target)) < rank:
            found.append(f"{module} -> {target}")
        for a, b in SIBLINGS:
            for mine, theirs in ((a, b), (b, a)):
                if module.startswith(mine) and target.startswith(theirs):
                    found.append(f"{module} -> {target}")
    return found


@pytest.mark.parametrize("path", gateway_modules(), ids=lambda p: module_name(p))
def test_no_module_imports_a_layer_above_its_own(path: Path) -> None:
    assert wrong_way(module_name(path), imports_of(path)) == []


def test_tool_registry_never_imports_gateway() -> None:
    offending = [
        f"{module_name(path)} -> {target}"
        for path in sorted((ROOT / "tool_registry").rglob("*.py"))
        for target in imports_of(path)
        if target.split(".")[0] == "gateway"
    ]
    assert offending == []


def test_the_check_sees_a_wrong_way_import() -> None:
    """The check itself can fail: an engine module importing a surface is caught, under
    ``TYPE_CHECKING`` too, and so is a surface importing its sibling."""
    planted = (
        "from typing import TYPE_CHECKING\n"
        "from gateway.values import ToolCall\n"
        "if TYPE_CHECKING:\n"
        "    from ..surfaces import http\n"
    )
    module = "gateway.engine.planted"
    assert wrong_way(module, imports_in(planted, "gateway.engine")) == [
        "gateway.engine.planted -> gateway.surfaces",
        "gateway.engine.planted -> gateway.surfaces.http",
    ]
    sibling = imports_in("from gateway.surfaces.chat import request", "gateway.surfaces.responses")
    assert wrong_way("gateway.surfaces.responses.render", sibling) == [
        "gateway.surfaces.responses.render -> gateway.surfaces.chat",
        "gateway.surfaces.responses.render -> gateway.surfaces.chat.request",
    ]
    assert layer_of("gateway.upstream.exchange") == "upstream"
    with pytest.raises(AssertionError, match="stands in no layer"):
        layer_of("gateway.loose_module")


def dialect_folders() -> set[str]:
    """The dialects: each a package under ``gateway/upstream/`` (docs/design.md §20)."""
    upstream = ROOT / "gateway" / "upstream"
    return {f"gateway.upstream.{path.parent.name}" for path in upstream.glob("*/__init__.py")}


def into_a_dialect(module: str, imports: set[str], dialects: set[str]) -> list[str]:
    """The imports of ``module`` that reach into a dialect's folder from outside
    ``upstream/`` (or from another dialect's): only the model port's factory
    (``upstream.servers``) names the dialects."""
    found = []
    for target in sorted(imports):
        for dialect in dialects:
            inside = target == dialect or target.startswith(dialect + ".")
            own = module == dialect or module.startswith(dialect + ".")
            if inside and not own and module != "gateway.upstream.servers":
                found.append(f"{module} -> {target}")
    return found


def test_only_the_factory_knows_the_dialects() -> None:
    dialects = dialect_folders()
    assert "gateway.upstream.openai" in dialects
    reaching = [
        line
        for path in gateway_modules()
        for line in into_a_dialect(module_name(path), imports_of(path), dialects)
    ]
    assert reaching == []
    planted = imports_in("from gateway.upstream.openai.model import ChatModel", "gateway.surfaces")
    assert into_a_dialect("gateway.surfaces.skeleton", planted, dialects) == [
        "gateway.surfaces.skeleton -> gateway.upstream.openai.model"
    ]


def test_gateway_uses_tool_registry_through_its_face() -> None:
    """``gateway`` reads ``tool_registry`` by its public names (its ``__all__``) only."""
    import tool_registry

    past = [
        f"{module_name(path)} -> {target}"
        for path in gateway_modules()
        for target in sorted(imports_of(path))
        if target.startswith("tool_registry.")
    ]
    assert past == []
    public = set(tool_registry.__all__)
    for path in gateway_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "tool_registry":
                assert {alias.name for alias in node.names} <= public, module_name(path)
