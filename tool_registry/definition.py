"""What a model is offered of a tool (docs/design.md §12): a value, in no API's dialect.

A ``function`` tool has a JSON Schema for its arguments; a ``custom`` tool takes free
text. What a definition says beyond its name, description and parameters — ``strict``,
a custom tool's ``format`` — is in ``extra`` as it came, and a tool of a type the
gateway does not read keeps all it said there too (a client's: the model server
judges it).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from .value_type import immutable

# What a value keeps of its wire form that the gateway does not read, as it came.
Extra = Mapping[str, object]


class _Nothing(Mapping[str, object]):
    """The empty ``Extra``: immutable, and hashable, so a default of frozen values."""

    __slots__ = ()

    def __getitem__(self, key: str) -> object:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "NO_EXTRA"


NO_EXTRA: Extra = _Nothing()


@immutable
class ToolDefinition:
    """A tool as a model is offered it. ``kind`` is ``function`` or ``custom``;
    ``parameters`` a function's JSON Schema; ``extra`` the rest of the function (or
    custom tool) object, ``outer`` the rest of the tool object. A client's tool the
    gateway does not read (another type) has no name or kind, and all it said in
    ``outer``."""

    name: str
    description: str | None = None
    parameters: Mapping[str, Any] | None = None
    kind: str = "function"
    extra: Extra = NO_EXTRA
    outer: Extra = NO_EXTRA
