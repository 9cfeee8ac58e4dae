"""Each package's error tree, as its ``errors`` module draws it, is true: every class
drawn is defined and made somewhere (or is the base of one that is), and every error
class the package defines is drawn (STYLE.md: one true tree per package)."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TREES = {"gateway": "GatewayError", "tool_registry": "ToolError"}
# A line of the drawn tree: four spaces, the branches, a class name.
_LINE = re.compile(r"^    ((?:[│ ]   )*(?:[├└]── )?)([A-Z]\w+)\b")


def drawn(package: str) -> dict[str, str | None]:
    """The classes of the tree in ``package.errors``'s docstring, each with its parent."""
    doc = importlib.import_module(f"{package}.errors").__doc__ or ""
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for line in doc.splitlines():
        found = _LINE.match(line)
        if found is None:
            continue
        depth, name = len(found.group(1)), found.group(2)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[name] = stack[-1][1] if stack else None
        stack.append((depth, name))
    return parents


def defined(package: str) -> dict[str, type[BaseException]]:
    """Every error class the package defines under its root, by name."""
    root = getattr(importlib.import_module(f"{package}.errors"), TREES[package])
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        importlib.import_module(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    found: dict[str, type[BaseException]] = {}
    pending: list[type[BaseException]] = [root]
    while pending:
        cls = pending.pop()
        if cls.__module__.split(".")[0] == package:
            found[cls.__name__] = cls
        pending += cls.__subclasses__()
    return found


def constructed(package: str) -> set[str]:
    """The names called anywhere in the package's code (``Name(...)``)."""
    names: set[str] = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                names.add(node.func.id)
    return names


@pytest.mark.parametrize("package", sorted(TREES))
def test_the_drawn_tree_is_the_defined_tree(package: str) -> None:
    tree, classes = drawn(package), defined(package)
    assert len(tree) > 5  # the drawing was read
    assert set(tree) == set(classes)
    for name, parent in tree.items():
        bases = {base.__name__ for base in classes[name].__bases__}
        assert parent is None or parent in bases, f"{name} is drawn under {parent}"


@pytest.mark.parametrize("package", sorted(TREES))
def test_every_drawn_class_is_raised_or_a_base(package: str) -> None:
    tree, made = drawn(package), constructed(package)
    parents = {parent for parent in tree.values() if parent is not None}
    unused = sorted(name for name in tree if name not in made and name not in parents)
    assert unused == []
