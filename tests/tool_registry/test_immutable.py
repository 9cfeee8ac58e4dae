"""``@immutable``: a value with equality, a hash and slots, cheap to make, and frozen
where it is checked (the type checker refuses any assignment to a field)."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest
from mypy import api as mypy_api

from tool_registry.value_type import immutable


@immutable
class Point:
    x: int
    y: int = 0
    tags: tuple[str, ...] = ()


@immutable(eq=False)
class Handle:
    name: str


def test_a_value_is_a_slotted_dataclass_compared_by_its_fields() -> None:
    assert [field.name for field in dataclasses.fields(Point)] == ["x", "y", "tags"]
    assert Point.__dict__["__slots__"] == ("x", "y", "tags")
    assert Point(1, 2) == Point(1, 2)
    assert Point(1, 2) != Point(1, 3)
    assert hash(Point(1, 2, ("a",))) == hash(Point(1, 2, ("a",)))
    assert {Point(1), Point(1)} == {Point(1)}
    assert dataclasses.replace(Point(1, 2), y=5) == Point(1, 5)
    assert repr(Point(1)) == "Point(x=1, y=0, tags=())"
    with pytest.raises(AttributeError):
        Point(1).z = 3  # type: ignore[attr-defined]  # slots: no other attribute


def test_one_compared_by_identity_keeps_the_identity_hash() -> None:
    one = Handle("a")
    assert one != Handle("a")
    assert one == one
    assert hash(one) == object.__hash__(one)


def test_the_type_checker_refuses_assigning_to_a_field(tmp_path: Path) -> None:
    source = tmp_path / "assigns.py"
    source.write_text(
        textwrap.dedent(
            """
            from dataclasses import field
            from tool_registry.value_type import immutable

            @immutable
            class Point:
                x: int
                tags: list[str] = field(default_factory=list)

            @immutable(eq=False)
            class Handle:
                name: str

            point = Point(1)
            point.x = 2
            Handle("a").name = "b"
            Point(1, ["a"], 3)
            """
        )
    )
    out, _, status = mypy_api.run(
        ["--strict", "--no-incremental", "--cache-dir=/dev/null", str(source)]
    )
    assert status == 1, out
    assert 'Property "x" defined in "Point" is read-only' in out
    assert 'Property "name" defined in "Handle" is read-only' in out
    assert 'Too many arguments for "Point"' in out
    assert "Found 3 errors" in out
