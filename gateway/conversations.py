"""The Conversations API (DESIGN.md §11): a named, durable thread of items that
responses read before their input and add their input and output to afterwards.

A conversation is a list of entries, each the visible item (as the items routes list
it) and the messages it stands for in the upstream dialect; the hidden rounds of a
response are an entry with no visible item. The model reads every entry's messages,
so deleting an item takes it out of what the model sees too — and deleting the item
a response answered with takes the hidden rounds that led to it along. Kept in the
store per tenant for ``responses.ttl_s``, owned by the identity that created it
(``identity.owner_digest``): another tenant's id, or another user's, is not found.
Every route is admitted as the model routes are (key, rate limit).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from tool_registry.jsonio import dumps, loads, loads_object

from .errors import BadRequest, NotFound
from .http import Exchange, json_response, read_body
from .identity import owner_digest
from .listing import page
from .responses_items import input_items, new_id, stored_items, to_messages
from .store import GuardedStore, Keys

if TYPE_CHECKING:
    from .app import Gateway
    from .chat import Admit

MAX_ITEMS_ADDED = 20  # per request, as OpenAI allows
_METADATA_ERROR = "'metadata' must be an object of at most 16 string values."


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


def visible_entries(items: list[dict[str, Any]]) -> list[Entry]:
    """Client items, each with an id and the messages it stands for."""
    return [Entry(item, to_messages([item])) for item in stored_items(items)]


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
            }
        )
        await self._store.put(self._keys.conversation(tenant, conversation.id), value, self._ttl_s)

    async def load(self, tenant: str, conversation_id: str) -> Conversation | None:
        value = await self._store.get(self._keys.conversation(tenant, conversation_id))
        found = loads_object(value) if value is not None else None
        if found is None:
            return None
        entries = [Entry(item, messages) for item, messages in found["entries"]]
        return Conversation(
            found["id"], found["created_at"], found["metadata"], found.get("owner", ""), entries
        )

    async def delete(self, tenant: str, conversation_id: str) -> None:
        await self._store.delete([self._keys.conversation(tenant, conversation_id)])


def _metadata(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if (
        not isinstance(value, dict)
        or len(value) > 16
        or not all(isinstance(v, str) and len(k) <= 64 for k, v in value.items())
    ):
        raise BadRequest(_METADATA_ERROR, param="metadata")
    return value


def _items_param(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    items = input_items(value)
    if len(items) > MAX_ITEMS_ADDED:
        raise BadRequest(f"At most {MAX_ITEMS_ADDED} items may be added at once.", param="items")
    return items


class Conversations:
    """``/v1/conversations`` and its items."""

    def __init__(self, gateway: Gateway, admit: Admit) -> None:
        self._gateway = gateway
        self._admit = admit

    async def _tenant(self, request: Request, exchange: Exchange) -> str:
        _, tenant, _ = await self._admit(request, exchange)
        return tenant.id

    async def _body(self, request: Request, exchange: Exchange) -> dict[str, Any]:
        server = self._gateway.config.server
        raw = await read_body(request, exchange, server.max_body_bytes, server.body_timeout_s)
        try:
            body = loads(raw) if raw else {}
        except ValueError as exc:
            raise BadRequest("The request body is not valid JSON.") from exc
        if not isinstance(body, dict):
            raise BadRequest("The request body must be a JSON object.")
        return body

    async def _admitted(self, request: Request, exchange: Exchange) -> tuple[str, Conversation]:
        """The request admitted, and the conversation its path names, if the caller owns it."""
        tenant = await self._tenant(request, exchange)
        conversation_id = request.path_params["conversation_id"]
        return tenant, await self.owned(tenant, conversation_id, exchange.identity)

    async def owned(
        self, tenant: str, conversation_id: str, identity: str, param: str | None = None
    ) -> Conversation:
        """The conversation, if ``identity`` (of ``tenant``) owns it; else not found."""
        found = await self._gateway.conversations.load(tenant, conversation_id)
        if found is None or found.owner != owner_digest(identity):
            raise NotFound(f"No conversation {conversation_id!r} for this key.", param=param)
        return found

    async def create(self, request: Request, exchange: Exchange) -> Response:
        tenant = await self._tenant(request, exchange)
        body = await self._body(request, exchange)
        conversation = Conversation(
            new_id("conv"),
            int(time.time()),
            _metadata(body.get("metadata")),
            owner_digest(exchange.identity),
        )
        conversation.entries = visible_entries(_items_param(body.get("items")))
        await self._gateway.conversations.save(tenant, conversation)
        return json_response(conversation.resource())

    async def retrieve(self, request: Request, exchange: Exchange) -> Response:
        _, conversation = await self._admitted(request, exchange)
        return json_response(conversation.resource())

    async def update(self, request: Request, exchange: Exchange) -> Response:
        tenant, conversation = await self._admitted(request, exchange)
        body = await self._body(request, exchange)
        conversation.metadata = _metadata(body.get("metadata"))
        await self._gateway.conversations.save(tenant, conversation)
        return json_response(conversation.resource())

    async def delete(self, request: Request, exchange: Exchange) -> Response:
        tenant, conversation = await self._admitted(request, exchange)
        await self._gateway.conversations.delete(tenant, conversation.id)
        return json_response(
            {"id": conversation.id, "object": "conversation.deleted", "deleted": True}
        )

    async def list_items(self, request: Request, exchange: Exchange) -> Response:
        _, conversation = await self._admitted(request, exchange)
        return json_response(page(conversation.items, request.query_params))

    async def add_items(self, request: Request, exchange: Exchange) -> Response:
        tenant, conversation = await self._admitted(request, exchange)
        body = await self._body(request, exchange)
        items = _items_param(body.get("items"))
        if not items:
            raise BadRequest("'items' must hold at least one item.", param="items")
        added = visible_entries(items)
        conversation.entries += added
        await self._gateway.conversations.save(tenant, conversation)
        page = [entry.item for entry in added if entry.item is not None]
        return json_response(
            {
                "object": "list",
                "data": page,
                "first_id": page[0]["id"],
                "last_id": page[-1]["id"],
                "has_more": False,
            }
        )

    async def get_item(self, request: Request, exchange: Exchange) -> Response:
        _, conversation = await self._admitted(request, exchange)
        return json_response(self._entry(conversation, request).item)

    async def delete_item(self, request: Request, exchange: Exchange) -> Response:
        tenant, conversation = await self._admitted(request, exchange)
        conversation.entries = without(conversation.entries, self._entry(conversation, request))
        await self._gateway.conversations.save(tenant, conversation)
        return json_response(conversation.resource())

    @staticmethod
    def _entry(conversation: Conversation, request: Request) -> Entry:
        item_id = request.path_params["item_id"]
        for entry in conversation.entries:
            if entry.item is not None and entry.item.get("id") == item_id:
                return entry
        raise NotFound(f"No item {item_id!r} in conversation {conversation.id!r}.")
