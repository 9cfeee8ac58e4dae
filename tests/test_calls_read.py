"""Calls that read (STYLE: "calls that read"): no call in the package passes seven or
more arguments by position — past six, a reader counts commas to know which is which,
so the callee takes them by keyword (or a value that names them). Read from the source
with ``ast``.

The exceptions are named, with why: the values a request builds on its path, once or
more a request. CPython 3.11 calls a class with keywords through a dict built and taken
apart again (about 2,000 instructions more a call than by position): with them, a
pass-through cost 11k instructions more and a tool round 57k more (``bench.instructions
--own``, this stop's note). A function called with keywords costs next to nothing: no
function is an exception."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gateway", "tool_registry")
MOST = 6
# The values built on a request's path, by position for speed (see above).
HOT_VALUES = frozenset(
    {
        "ChatRequest",
        "MessagesRequest",
        "OllamaRequest",
        "Head",
        "Plan",
        "ModelAsk",
        "LoopLimits",
        "Catalog",
        "ToolRunner",
        "RoundLine",
        "CallRecord",
        "Spend",
        "Completion",
        "ParseResult",
    }
)


def crowded(source: str) -> list[tuple[int, str, int]]:
    """The calls of ``source`` with more than ``MOST`` positional arguments."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and len(node.args) > MOST
            and not any(isinstance(arg, ast.Starred) for arg in node.args)
        ):
            found.append((node.lineno, ast.unparse(node.func), len(node.args)))
    return found


def test_no_call_passes_seven_arguments_by_position() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line} {name}({count} by position)"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for line, name, count in crowded(path.read_text())
        if name not in HOT_VALUES
    ]
    assert found == [], "\n".join(found)


def test_each_exception_is_still_one() -> None:
    """An exception no call needs any more is taken off the list."""
    used = {
        name
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        for _, name, _ in crowded(path.read_text())
    }
    assert used >= HOT_VALUES, sorted(HOT_VALUES - used)


def test_the_rule_sees_a_crowded_call() -> None:
    assert crowded("f(1, 2, 3, 4, 5, 6, 7)") == [(1, "f", 7)]
    assert crowded("f(1, 2, 3, 4, 5, 6, g=7)") == []
    assert crowded("f(*args, 1, 2, 3, 4, 5, 6)") == []
