"""Conversations as the store keeps them (DESIGN.md §11): their items, each with the
messages it stands for, and the hidden rounds between them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.store import GuardedStore, Keys
from tool_registry import dumps, loads_object


@dataclass(slots=True)
class Entry:
    item: dict[str, Any] | None  # None: hidden rounds
    messages: list[dict[str, Any]]


@dataclass(slots=True)
class Conversation:
    id: str
    created_at: int
    metadata: dict[str, str]
    owner: str  # who created it: only the same identity reads, changes or continues it
    entries: list[Entry] = field(default_factory=list)
    taint: str | None = None  # where a run of it first read untrusted words (DESIGN.md §13)

    def resource(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "conversation",
            "created_at": self.created_at,
            "metadata": self.metadata,
        }

    @property
    def messages(self) -> list[dict[str, Any]]:
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

    async def save(self, tenant: str, conversation: Conversation) -> None:
        value = dumps(
            {
                "id": conversation.id,
                "created_at": conversation.created_at,
                "metadata": conversation.metadata,
                "owner": conversation.owner,
                "entries": [[e.item, e.messages] for e in conversation.entries],
                "taint": conversation.taint,
            }
        )
        await self._store.put(self._keys.conversation(tenant, conversation.id), value, self._ttl_s)

    async def load(self, tenant: str, conversation_id: str) -> Conversation | None:
        value = await self._store.get(self._keys.conversation(tenant, conversation_id))
        found = loads_object(value) if value is not None else None
        if found is None:
            return None
        entries = [Entry(item, messages) for item, messages in found["entries"]]
        taint = found.get("taint")
        return Conversation(
            found["id"],
            found["created_at"],
            found["metadata"],
            found.get("owner", ""),
            entries,
            taint if isinstance(taint, str) else None,
        )

    async def delete(self, tenant: str, conversation_id: str) -> None:
        await self._store.delete([self._keys.conversation(tenant, conversation_id)])
