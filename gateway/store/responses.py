"""Stored responses (docs/design.md §11): a response, its input items and the whole
conversation that led to it (hidden rounds included), kept under its ``resp_…`` id and
its tenant for ``responses.ttl_s``, with the digest of the identity that made it
(``identity.owner_digest``). ``previous_response_id`` continues from it on any replica;
another tenant's id, or another user's, is not found.

Version 2 (written now, under a key of its own) keeps the conversation as the
gateway's values (``message_records``). Version 1 (no ``v``, under the old key) kept
chat-completions messages and is still read, so an upgrade loses no stored response;
an older replica does not read version 2 (it answers not found). A record of neither
shape is logged and not found.
"""

from __future__ import annotations

import logging
from typing import Any

from gateway.store import GuardedStore, Keys, StoreUnavailable
from gateway.store.message_records import (
    RecordUnreadable,
    listed,
    mapping,
    read_messages,
    read_record,
    read_v1,
    written,
)
from gateway.values import Message
from tool_registry import dumps, immutable

logger = logging.getLogger("gateway.responses")

VERSION = 2


@immutable
class StoredResponse:
    response: dict[str, Any]  # as it was answered (the Responses API's object)
    input_items: list[dict[str, Any]]  # as ``input_items`` lists them
    messages: list[Message]  # the conversation through this response's output
    owner: str  # who made it: only the same identity reads or continues it
    taint: str | None = None  # where its run first read untrusted words (docs/design.md §13)


class ResponseStore:
    def __init__(self, store: GuardedStore, keys: Keys, ttl_s: float) -> None:
        self._store = store
        self._keys = keys
        self._ttl_s = ttl_s

    async def save(
        self,
        tenant: str,
        stored: StoredResponse,
        encoded: bytes | None = None,
        items: bytes | None = None,
    ) -> bool:
        """Keep a response (``encoded``: its JSON, when it was written already; ``items``:
        its input items' JSON, in place of ``stored.input_items``); False (and a log
        line) when the store is unavailable."""
        messages = await written(stored.messages)
        value = b"".join(
            (
                b'{"v":2,"response":',
                encoded if encoded is not None else dumps(stored.response),
                b',"input_items":',
                items if items is not None else dumps(stored.input_items),
                b',"messages":',
                messages,
                b',"owner":',
                dumps(stored.owner),
                b',"taint":',
                dumps(stored.taint),
                b"}",
            )
        )
        key = self._keys.stored_response(tenant, stored.response["id"])
        try:
            await self._store.keep(key, value, self._ttl_s)
        except StoreUnavailable:
            logger.warning("response %s not stored: store unavailable", stored.response["id"])
            return False
        return True

    def _keys_of(self, tenant: str, response_id: str) -> list[str]:
        return [
            self._keys.stored_response(tenant, response_id),
            self._keys.response(tenant, response_id),
        ]

    async def load(self, tenant: str, response_id: str) -> StoredResponse | None:
        keys = self._keys_of(tenant, response_id)
        what = f"response {response_id} of tenant {tenant}"
        return await read_record(self._store, keys, _read, what)

    async def delete(self, tenant: str, response_id: str) -> bool:
        keys = self._keys_of(tenant, response_id)
        if all(value is None for value in await self._store.get_many(keys)):
            return False
        await self._store.delete(keys)
        return True


def _read(found: dict[str, Any]) -> StoredResponse:
    version = found.get("v", 1)
    if version == VERSION:
        messages = read_messages(found.get("messages"))
    elif version == 1:
        messages = read_v1(found.get("messages"))
    else:
        raise RecordUnreadable(f"version {version!r} is not one this gateway reads")
    response = mapping(found.get("response"))
    if not isinstance(response.get("id"), str):
        raise RecordUnreadable("the response has no id")
    owner, taint = found.get("owner", ""), found.get("taint")
    return StoredResponse(
        response,
        [mapping(item) for item in listed(found.get("input_items"))],
        messages,
        owner if isinstance(owner, str) else "",
        taint if isinstance(taint, str) else None,
    )
