"""How a saved turn is written and read (docs/design.md §6, §10): the engine's values, with
a version, never a wire dialect.

Version 2 (written now)::

    {"v": 2, "before": [ITEM, ...], "turn": TURN, "outputs": [OUTPUT, ...],
     "ids": [str, ...], "taint": str | null}

    ITEM   = {"turn": TURN} | {"output": OUTPUT}
    TURN   = {"content": str | null, "refusal": str | null, "calls": [CALL, ...]}
    CALL   = {"id": str, "name": str | null, "arguments": str,
              "kind": "function" | "custom" | "approval"}
    OUTPUT = {"call_id": str, "content": str}

Version 1 (what the gateway wrote before: no ``v``) held chat-completions messages —
``before`` and ``results`` tool and assistant messages, ``assistant`` one assistant
message — under the same fields this module reads them from, so an upgrade loses no
saved turn. A record in neither shape reads as none (``RecordUnreadable``).
"""

from __future__ import annotations

from typing import Any

from gateway.store.message_records import (
    RecordUnreadable,
    call_record,
    carried_blocks,
    listed,
    mapping,
    optional,
    read_call,
    string,
)
from gateway.values import AssistantMessage, HiddenItem, ToolCall, ToolOutput
from tool_registry import dumps, immutable, loads_object

VERSION = 2


@immutable
class SavedTurn:
    """The hidden rounds before a hand-back, its whole turn (the server calls in it
    with the client's), the server calls' outputs, the client calls' ids, and where
    the run first read untrusted words, if it had."""

    before: tuple[HiddenItem, ...]
    turn: AssistantMessage
    outputs: tuple[ToolOutput, ...]
    ids: tuple[str, ...]
    taint: str | None = None


def encode(saved: SavedTurn) -> bytes:
    return dumps(
        {
            "v": VERSION,
            "before": [_item(item) for item in saved.before],
            "turn": _turn(saved.turn),
            "outputs": [_output(output) for output in saved.outputs],
            "ids": list(saved.ids),
            "taint": saved.taint,
        }
    )


def decode(data: bytes) -> SavedTurn:
    found = loads_object(data)
    if found is None:
        raise RecordUnreadable("not a JSON object")
    version = found.get("v", 1)
    if version == VERSION:
        return SavedTurn(
            tuple(_read_item(item) for item in listed(found.get("before"))),
            _read_turn(found.get("turn")),
            tuple(_read_output(output) for output in listed(found.get("outputs"))),
            tuple(string(i) for i in listed(found.get("ids"))),
            _taint(found.get("taint")),
        )
    if version == 1:
        return _version_1(found)
    raise RecordUnreadable(f"version {version!r} is not one this gateway reads")


# -- version 2 ----------------------------------------------------------------------


def _turn(turn: AssistantMessage) -> dict[str, Any]:
    record = {
        "content": turn.content,
        "refusal": turn.refusal,
        "calls": [call_record(call) for call in turn.calls],
    }
    if turn.carried:
        record["carried"] = [dict(block) for block in turn.carried]
    return record


def _output(output: ToolOutput) -> dict[str, Any]:
    record: dict[str, Any] = {"call_id": output.call_id, "content": output.content}
    if output.error:
        record["error"] = True
    return record


def _item(item: HiddenItem) -> dict[str, Any]:
    return (
        {"turn": _turn(item)} if isinstance(item, AssistantMessage) else {"output": _output(item)}
    )


def _taint(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _read_turn(value: Any) -> AssistantMessage:
    turn = mapping(value)
    calls = tuple(read_call(call) for call in listed(turn.get("calls")))
    carried = carried_blocks(turn.get("carried"))
    content, refusal = optional(turn.get("content")), optional(turn.get("refusal"))
    return AssistantMessage(content, calls, refusal, carried)


def _read_output(value: Any) -> ToolOutput:
    output = mapping(value)
    error = output.get("error") is True
    return ToolOutput(string(output.get("call_id")), string(output.get("content")), error)


def _read_item(value: Any) -> HiddenItem:
    item = mapping(value)
    if "turn" in item:
        return _read_turn(item["turn"])
    return _read_output(item.get("output"))


# -- version 1: chat-completions messages ---------------------------------------------


def _version_1(found: dict[str, Any]) -> SavedTurn:
    before = tuple(_v1_message(message) for message in listed(found.get("before") or []))
    turn = _v1_message(found.get("assistant"))
    if not isinstance(turn, AssistantMessage):
        raise RecordUnreadable("the turn is not an assistant message")
    outputs = tuple(_v1_message(message) for message in listed(found.get("results")))
    if not all(isinstance(output, ToolOutput) for output in outputs):
        raise RecordUnreadable("a result is not a tool message")
    ids = tuple(string(i) for i in listed(found.get("ids") or []))
    return SavedTurn(before, turn, outputs, ids, _taint(found.get("taint")))  # type: ignore[arg-type]


def _v1_message(value: Any) -> HiddenItem:
    """A message as version 1 wrote it: an assistant turn (``dialect.turn_message``)
    or a tool's output (``dialect.output_message``)."""
    message = mapping(value)
    if message.get("role") == "tool":
        return ToolOutput(string(message.get("tool_call_id")), string(message.get("content")))
    if message.get("role") != "assistant":
        raise RecordUnreadable("a message of another role")
    calls = tuple(_v1_call(call) for call in listed(message.get("tool_calls") or []))
    return AssistantMessage(optional(message.get("content")), calls)


def _v1_call(value: Any) -> ToolCall:
    call = mapping(value)
    call_id = string(call.get("id"))
    if call.get("type") == "custom":
        custom = mapping(call.get("custom"))
        return ToolCall(
            call_id, optional(custom.get("name")), string(custom.get("input")), "custom"
        )
    function = mapping(call.get("function"))
    # A function call, as it was written: read back, it is written the same way.
    return ToolCall(call_id, optional(function.get("name")), string(function.get("arguments")))


def put_back(saved: SavedTurn) -> tuple[HiddenItem, ...]:
    """Everything a saved turn puts back, in order: the rounds before its hand-back,
    its turn, and its server calls' outputs."""
    return (*saved.before, saved.turn, *saved.outputs)
