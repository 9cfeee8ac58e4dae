"""What every dialect does the same way (docs/design.md §6, §20): a round's
``tool_choice``, a round's messages as telemetry records them, and server tools
declared once per set in a dialect's own form.

Pure: no I/O."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from gateway.values import HiddenItem, Message, ToolChoice, ToolDefinition, as_message


def round_tool_choice(
    choice: ToolChoice | None, first: bool, final: bool, client_tools: frozenset[str]
) -> ToolChoice | None:
    """The ``tool_choice`` of a round (docs/design.md §6): the forced last round's is
    ``"none"``; the first round's is the client's.

    After the first round, ``"required"`` or a named client tool stays while the client
    has tools of its own: the answer it sees must be the tool call it demanded, so
    hidden rounds go on until the model makes it. Forcing a server tool, or
    ``"required"`` with server tools only, was met by the first round: ``"auto"``.
    """
    if final:
        return _NONE
    if first or choice is None:
        return choice
    if choice.unread is not None:  # a shape the gateway does not read: as named, if at all
        raw = choice.unread
        kind = raw.get("type") if isinstance(raw, dict) else None
        named = raw.get(kind) if isinstance(raw, dict) and isinstance(kind, str) else None
        if isinstance(named, dict) and named.get("name") in client_tools:
            return choice
        return _AUTO
    if choice.name is not None:
        return choice if choice.name in client_tools else _AUTO
    if choice.allowed is None and choice.mode in ("auto", "none"):
        return choice
    if choice.allowed is None and choice.mode == "required" and client_tools:
        return choice
    return _AUTO


_AUTO, _NONE = ToolChoice("auto"), ToolChoice("none")


def genai_messages(history: Iterable[Message]) -> Iterator[dict[str, Any]]:
    """Messages as the GenAI conventions write input messages (for telemetry that
    records content), one at a time: a role and parts (text, tool calls, tool call
    responses). What is not text (images, audio, files) is named by its type, never
    copied."""
    for message in history:
        parts: list[dict[str, Any]] = []
        content = message.content
        response = message.role == "tool"
        if isinstance(content, str):
            parts.append(_content_part(response, content, message))
        elif content is not None:
            for part in content:
                if part.text is not None:
                    parts.append(_content_part(response, part.text, message))
                else:
                    parts.append({"type": part.type})
        for call in message.calls:
            parts.append(
                {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}
            )
        yield {"role": message.role, "parts": parts}


def _content_part(response: bool, text: str, message: Message) -> dict[str, Any]:
    if response:
        return {"type": "tool_call_response", "id": message.call_id, "response": text}
    return {"type": "text", "content": text}


def with_hidden(history: Sequence[Message], hidden: Iterable[HiddenItem]) -> list[Message]:
    """A history with hidden items after it, as messages."""
    return [*history, *(as_message(item) for item in hidden)]


class Declarations:
    """Server tools as a dialect declares them (``declare``, one definition's form),
    worked out once per distinct set: a snapshot's registry hands out one tuple of
    definitions for the same names, so the same tuple is declared once (kept with it,
    so its id is never another's)."""

    __slots__ = ("_declare", "_each", "_found", "_kept")

    def __init__(self, declare: Callable[[ToolDefinition], Any], kept: int = 256) -> None:
        self._declare = declare
        self._kept = kept
        self._found: dict[int, tuple[tuple[ToolDefinition, ...], list[Any]]] = {}
        self._each: dict[int, tuple[ToolDefinition, dict[str, Any]]] = {}

    def __call__(self, definitions: tuple[ToolDefinition, ...]) -> list[Any]:
        found = self._found.get(id(definitions))
        if found is not None and found[0] is definitions:
            return found[1]
        if len(self._found) >= self._kept:
            self._found.clear()
        declared = [self._declare(definition) for definition in definitions]
        self._found[id(definitions)] = (definitions, declared)
        return declared

    def each(self, definitions: tuple[ToolDefinition, ...]) -> list[Any]:
        """Definitions whose sets vary round by round (tool search), each declared once."""
        declared = []
        each = self._each
        for definition in definitions:
            found = each.get(id(definition))
            if found is None or found[0] is not definition:
                if len(each) >= self._kept * 64:
                    each.clear()
                found = each[id(definition)] = (definition, self._declare(definition))
            declared.append(found[1])
        return declared
