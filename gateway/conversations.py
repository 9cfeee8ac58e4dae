"""The Conversations API (DESIGN.md §11): a named, durable thread of items that
responses read before their input and add their input and output to afterwards.

A conversation is a list of entries, each the visible item (as the items routes list
it) and the messages it stands for in the upstream dialect; the hidden rounds of a
response are an entry with no visible item. The model reads every entry's messages,
so deleting an item takes it out of what the model sees too. Kept in the store per
tenant for ``responses.ttl_s``; another tenant's id is not found.
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
from .responses_items import input_items, new_id, stored_items, to_messages
from .store import GuardedStore, Keys

if TYPE_CHECKING:
    from .app import Gateway

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
        return Conversation(found["id"], found["created_at"], found["metadata"], entries)

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


def _page(items: list[dict[str, Any]], request: Request) -> dict[str, Any]:
    if request.query_params.get("order") != "asc":
        items = items[::-1]  # newest first, as OpenAI lists them by default
    return {
        "object": "list",
        "data": items,
        "first_id": items[0]["id"] if items else None,
        "last_id": items[-1]["id"] if items else None,
        "has_more": False,
    }


class Conversations:
    """``/v1/conversations`` and its items."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    def _tenant(self, request: Request, exchange: Exchange) -> str:
        tenant = self._gateway.runtime.tenants.authenticate(request.headers.get("authorization"))
        exchange.tenant = tenant.id
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

    async def _load(self, tenant: str, request: Request) -> Conversation:
        conversation_id = request.path_params["conversation_id"]
        found = await self._gateway.conversations.load(tenant, conversation_id)
        if found is None:
            raise NotFound(f"No conversation {conversation_id!r} for this key.")
        return found

    async def create(self, request: Request, exchange: Exchange) -> Response:
        tenant = self._tenant(request, exchange)
        body = await self._body(request, exchange)
        conversation = Conversation(
            new_id("conv"), int(time.time()), _metadata(body.get("metadata"))
        )
        conversation.entries = visible_entries(_items_param(body.get("items")))
        await self._gateway.conversations.save(tenant, conversation)
        return json_response(conversation.resource())

    async def retrieve(self, request: Request, exchange: Exchange) -> Response:
        conversation = await self._load(self._tenant(request, exchange), request)
        return json_response(conversation.resource())

    async def update(self, request: Request, exchange: Exchange) -> Response:
        tenant = self._tenant(request, exchange)
        body = await self._body(request, exchange)
        conversation = await self._load(tenant, request)
        conversation.metadata = _metadata(body.get("metadata"))
        await self._gateway.conversations.save(tenant, conversation)
        return json_response(conversation.resource())

    async def delete(self, request: Request, exchange: Exchange) -> Response:
        tenant = self._tenant(request, exchange)
        conversation = await self._load(tenant, request)
        await self._gateway.conversations.delete(tenant, conversation.id)
        return json_response(
            {"id": conversation.id, "object": "conversation.deleted", "deleted": True}
        )

    async def list_items(self, request: Request, exchange: Exchange) -> Response:
        conversation = await self._load(self._tenant(request, exchange), request)
        return json_response(_page(conversation.items, request))

    async def add_items(self, request: Request, exchange: Exchange) -> Response:
        tenant = self._tenant(request, exchange)
        body = await self._body(request, exchange)
        items = _items_param(body.get("items"))
        if not items:
            raise BadRequest("'items' must hold at least one item.", param="items")
        conversation = await self._load(tenant, request)
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
        conversation = await self._load(self._tenant(request, exchange), request)
        return json_response(self._entry(conversation, request).item)

    async def delete_item(self, request: Request, exchange: Exchange) -> Response:
        tenant = self._tenant(request, exchange)
        conversation = await self._load(tenant, request)
        entry = self._entry(conversation, request)
        conversation.entries = [e for e in conversation.entries if e is not entry]
        await self._gateway.conversations.save(tenant, conversation)
        return json_response(conversation.resource())

    @staticmethod
    def _entry(conversation: Conversation, request: Request) -> Entry:
        item_id = request.path_params["item_id"]
        for entry in conversation.entries:
            if entry.item is not None and entry.item.get("id") == item_id:
                return entry
        raise NotFound(f"No item {item_id!r} in conversation {conversation.id!r}.")
