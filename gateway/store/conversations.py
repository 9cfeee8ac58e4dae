"""Conversations as the store keeps them (docs/design.md §11): their items, each with the
messages it stands for, and the hidden rounds between them.

Version 2 (written now, under a key of its own) keeps the messages as the gateway's
values (``message_records``). Version 1 (no ``v``, under the old key) kept
chat-completions messages and is still read; saved again, it moves to version 2. An
older replica does not read version 2 (it answers not found). A record of neither
shape is logged and not found.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.ops.offload import offload
from gateway.store import GuardedStore, Keys
from gateway.store.message_records import (
    HEAVY_MESSAGES,
    RecordUnreadable,
    listed,
    mapping,
    message_records,
    read_messages,
    read_record,
    read_v1,
)
from gateway.values import Message
from tool_registry import dumps

VERSION = 2


@dataclass(slots=True)
class Entry:
    item: dict[str, Any] | None  # None: hidden rounds
    messages: list[Message]


@dataclass(slots=True)
class Conversation:
    id: str
    created_at: int
    metadata: dict[str, str]
    owner: str  # who created it: only the same identity reads, changes or continues it
    entries: list[Entry] = field(default_factory=list)
    taint: str | None = None  # where a run of it first read untrusted words (docs/design.md §13)
    version: int = VERSION  # of the record it was read from

    def resource(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "conversation",
            "created_at": self.created_at,
            "metadata": self.metadata,
        }

    @property
    def messages(self) -> list[Message]:
        return [message for entry in self.entries for message in entry.messages]

    @property
    def items(self) -> list[dict[str, Any]]:
        return [entry.item for entry in self.entries if entry.item is not None]


def without(entries: list[Entry], entry: Entry) -> list[Entry]:
    """``entries`` less ``entry``; when it is the item a response answered with, less
    the hidden rounds just before it too: they led to that answer, and the model must
    not read a deleted turn's tool calls and results."""
    index = next(i for i, e in enumerate(entries) if e is entry)
    start = index
    while start > 0 and entries[start - 1].item is None:
        start -= 1
    return [*entries[:start], *entries[index + 1 :]]


class ConversationStore:
    def __init__(self, store: GuardedStore, keys: Keys, ttl_s: float) -> None:
        self._store = store
        self._keys = keys
        self._ttl_s = ttl_s

    def _keys_of(self, tenant: str, conversation_id: str) -> list[str]:
        return [
            self._keys.stored_conversation(tenant, conversation_id),
            self._keys.conversation(tenant, conversation_id),
        ]

    async def save(self, tenant: str, conversation: Conversation) -> None:
        heavy = sum(len(entry.messages) for entry in conversation.entries) > HEAVY_MESSAGES
        value = await offload(heavy, _encode, conversation)  # a long one off the event loop
        new, old = self._keys_of(tenant, conversation.id)
        await self._store.keep(new, value, self._ttl_s)  # a client was told it is kept
        if conversation.version != VERSION:  # moved: the old record would come back
            await self._store.delete([old])
            conversation.version = VERSION

    async def load(self, tenant: str, conversation_id: str) -> Conversation | None:
        keys = self._keys_of(tenant, conversation_id)
        what = f"conversation {conversation_id} of tenant {tenant}"
        return await read_record(self._store, keys, _read, what)

    async def delete(self, tenant: str, conversation_id: str) -> None:
        await self._store.delete(self._keys_of(tenant, conversation_id))


def _encode(conversation: Conversation) -> bytes:
    return dumps(
        {
            "v": VERSION,
            "id": conversation.id,
            "created_at": conversation.created_at,
            "metadata": conversation.metadata,
            "owner": conversation.owner,
            "entries": [[e.item, message_records(e.messages)] for e in conversation.entries],
            "taint": conversation.taint,
        }
    )


def _read(found: dict[str, Any]) -> Conversation:
    version = found.get("v", 1)
    if version not in (1, VERSION):
        raise RecordUnreadable(f"version {version!r} is not one this gateway reads")
    read = read_messages if version == VERSION else read_v1
    entries = []
    for entry in listed(found.get("entries")):
        pair = listed(entry)
        if len(pair) != 2:
            raise RecordUnreadable("an entry is not an item and its messages")
        item, messages = pair
        entries.append(Entry(None if item is None else mapping(item), read(messages)))
    created, metadata = found.get("created_at"), mapping(found.get("metadata"))
    owner, taint = found.get("owner", ""), found.get("taint")
    if not isinstance(found.get("id"), str) or not isinstance(created, int):
        raise RecordUnreadable("the conversation has no id or time")
    return Conversation(
        id=found["id"],
        created_at=created,
        metadata=metadata,
        owner=owner if isinstance(owner, str) else "",
        entries=entries,
        taint=taint if isinstance(taint, str) else None,
        version=version,
    )
