"""The Conversations API (docs/design.md §11): a named, durable thread of items that
responses read before their input and add their input and output to afterwards.

A conversation is a list of entries, each the visible item (as the items routes list
it) and the messages it stands for (``Message`` values); the hidden rounds of a
response are an entry with no visible item. The model reads every entry's messages,
so deleting an item takes it out of what the model sees too — and deleting the item
a response answered with takes the hidden rounds that led to it along. Kept in the
store per tenant for ``responses.ttl_s``, owned by the identity that created it
(``identity.owner_digest``): another tenant's id, or another user's, is not found.
Every route is admitted as the model routes are (key, rate limit).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.errors import BadRequest, NotFound
from gateway.ops.offload import offload
from gateway.policy.identity import owner_digest
from gateway.store.conversations import Conversation, Entry, without
from gateway.surfaces.http import Exchange, json_response, read_body
from gateway.surfaces.listing import page
from gateway.surfaces.responses.items import input_items, new_id, stored_items, to_messages
from tool_registry import loads

if TYPE_CHECKING:
    from gateway.runtime.services import Gateway
    from gateway.surfaces.head import Admission

MAX_ITEMS_ADDED = 20  # per request, as OpenAI allows
_METADATA_ERROR = "'metadata' must be an object of at most 16 string values."


def visible_entries(items: list[dict[str, Any]]) -> list[Entry]:
    """Client items, each with an id and the messages it stands for."""
    return [Entry(item, to_messages([item])) for item in stored_items(items)]


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

    def __init__(self, gateway: Gateway, admit: Admission) -> None:
        self._gateway = gateway
        self._admit = admit

    async def _tenant(self, request: Request, exchange: Exchange) -> str:
        _, tenant, _ = await self._admit(request, exchange)
        return tenant.id

    async def _body(self, request: Request, exchange: Exchange) -> dict[str, Any]:
        server = self._gateway.config.server
        raw = await read_body(request, exchange, server, self._gateway.large_bodies)
        try:
            body = await offload(len(raw) > server.large_body_bytes, loads, raw) if raw else {}
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
