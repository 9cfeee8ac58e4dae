"""How a message of a history is written into a stored record and read back (docs/design.md
§10): the value (``values.Message``), never a wire dialect. Stored responses and
conversations use it from their version 2 on.

::

    MESSAGE = {"role": str, "content": str | [PART, ...] (absent: no text read),
               "calls": [CALL, ...] (absent: none), "call_id": str (a tool message's),
               "extra": {...} (absent: nothing else),
               "carried": [{...}, ...] (an assistant turn's blocks for its dialect;
               absent: none)}
    PART    = {"type": str, "text": str (absent: none), "extra": {...} (absent: nothing)}
    CALL    = {"id": str, "name": str | null, "arguments": str,
               "kind": "function" | "custom" | "approval"}

Version 1 (what the gateway wrote before) held chat-completions messages;
``read_v1`` reads them as the chat surface reads a client's. A record of neither shape
raises ``RecordUnreadable``. ``read_record`` finds a record under the keys of its
versions and reads it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from types import MappingProxyType
from typing import Any, TypeVar, get_args

from gateway.chat_json import decode_message
from gateway.ops.offload import offload
from gateway.store.guard import GuardedStore
from gateway.values import NO_EXTRA, CallKind, Carried, Extra, Message, Part, ToolCall
from tool_registry import dumps_each, loads_object

logger = logging.getLogger("gateway.store")

T = TypeVar("T")
HEAVY_BYTES = 256 * 1024  # a record this large is read off the event loop


class RecordUnreadable(ValueError):
    """A stored record is not of any version this code reads."""


def call_record(call: ToolCall) -> dict[str, object]:
    return {"id": call.id, "name": call.name, "arguments": call.arguments, "kind": call.kind}


def _part(part: Part) -> dict[str, object]:
    record: dict[str, object] = {"type": part.type}
    if part.text is not None:
        record["text"] = part.text
    if part.extra:
        record["extra"] = dict(part.extra)
    return record


def message_record(message: Message) -> dict[str, object]:
    record: dict[str, object] = {"role": message.role}
    content = message.content
    if isinstance(content, str):
        record["content"] = content
    elif content is not None:
        record["content"] = [_part(part) for part in content]
    if message.calls:
        record["calls"] = [call_record(call) for call in message.calls]
    if message.call_id is not None:
        record["call_id"] = message.call_id
    if message.extra:
        record["extra"] = dict(message.extra)
    if message.carried:
        record["carried"] = [dict(block) for block in message.carried]
    return record


def message_records(messages: Iterable[Message]) -> list[dict[str, object]]:
    return [message_record(message) for message in messages]


HEAVY_MESSAGES = 1000  # writing more (a few µs each) is done off the event loop


async def written(messages: Sequence[Message]) -> bytes:
    """``messages`` as the JSON of their records, off the event loop for many."""
    return await offload(len(messages) > HEAVY_MESSAGES, _written, messages)


def _written(messages: Sequence[Message]) -> bytes:
    """Record by record: a long conversation's records are never all held at once."""
    return dumps_each(messages, message_record)


# -- reading ----------------------------------------------------------------------------


def string(value: Any) -> str:
    if not isinstance(value, str):
        raise RecordUnreadable("a string is missing")
    return value


def optional(value: Any) -> str | None:
    return None if value is None else string(value)


def listed(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise RecordUnreadable("a list is missing")
    return value


def mapping(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RecordUnreadable("an object is missing")
    return value


def _extra(value: Any) -> Extra:
    return NO_EXTRA if value is None else MappingProxyType(mapping(value))


def carried_blocks(value: Any) -> Carried:
    """An assistant turn's carried blocks (absent: none)."""
    if value is None:
        return ()
    return tuple(MappingProxyType(mapping(block)) for block in listed(value))


def read_call(value: Any) -> ToolCall:
    call = mapping(value)
    kind: CallKind | None = next((k for k in get_args(CallKind) if k == call.get("kind")), None)
    if kind is None:
        raise RecordUnreadable(f"a call of kind {call.get('kind')!r}")
    return ToolCall(
        string(call.get("id")), optional(call.get("name")), string(call.get("arguments")), kind
    )


def _read_part(value: Any) -> Part:
    part = mapping(value)
    return Part(string(part.get("type")), optional(part.get("text")), _extra(part.get("extra")))


def read_message(value: Any) -> Message:
    record = mapping(value)
    content = record.get("content")
    read: str | tuple[Part, ...] | None
    if content is None or isinstance(content, str):
        read = content
    else:
        read = tuple(_read_part(part) for part in listed(content))
    return Message(
        string(record.get("role")),
        read,
        tuple(read_call(call) for call in listed(record.get("calls", []))),
        optional(record.get("call_id")),
        _extra(record.get("extra")),
        carried_blocks(record.get("carried")),
    )


def read_messages(value: Any) -> list[Message]:
    return [read_message(message) for message in listed(value)]


def read_v1(value: Any) -> list[Message]:
    """Version 1's chat-completions messages."""
    messages = listed(value)
    for message in messages:
        if not isinstance(mapping(message).get("role"), str):
            raise RecordUnreadable("a message without a role")
    return [decode_message(message) for message in messages]


async def read_record(
    store: GuardedStore, keys: Sequence[str], read: Callable[[dict[str, Any]], T], what: str
) -> T | None:
    """The first of ``keys`` the store holds (the newest version's key first) read by
    ``read`` — off the event loop for a large one (a long conversation); None when
    there is none, or (logged, naming ``what``) when it cannot be read."""
    values = await store.get_many(list(keys))
    value = next((v for v in values if v is not None), None)
    if value is None:
        return None
    try:
        return await offload(len(value) > HEAVY_BYTES, _decoded, value, read)
    except RecordUnreadable as exc:
        logger.warning("%s could not be read: %s", what, exc)
        return None


def _decoded(value: bytes, read: Callable[[dict[str, Any]], T]) -> T:
    found = loads_object(value)
    if found is None:
        raise RecordUnreadable("not a JSON object")
    return read(found)
