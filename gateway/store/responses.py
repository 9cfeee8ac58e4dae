"""Stored responses (DESIGN.md §11): a response, its input items and the whole
conversation that led to it (hidden rounds included, in the upstream dialect), kept
under its ``resp_…`` id and its tenant for ``responses.ttl_s``, with the digest of the
identity that made it (``identity.owner_digest``). ``previous_response_id`` continues
from it on any replica; another tenant's id, or another user's, is not found."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from gateway.store import GuardedStore, Keys, StoreUnavailable
from tool_registry import dumps, loads_object

logger = logging.getLogger("gateway.responses")


@dataclass(frozen=True, slots=True)
class StoredResponse:
    response: dict[str, Any]
    input_items: list[dict[str, Any]]
    messages: list[dict[str, Any]]  # the conversation through this response's output
    owner: str  # who made it: only the same identity reads or continues it
    taint: str | None = None  # where its run first read untrusted words (DESIGN.md §13)


class ResponseStore:
    def __init__(self, store: GuardedStore, keys: Keys, ttl_s: float) -> None:
        self._store = store
        self._keys = keys
        self._ttl_s = ttl_s

    async def save(self, tenant: str, stored: StoredResponse, encoded: bytes | None = None) -> bool:
        """Keep a response (``encoded``: its JSON, when it was written already); False
        (and a log line) when the store is unavailable."""
        value = b"".join(
            (
                b'{"response":',
                encoded if encoded is not None else dumps(stored.response),
                b',"input_items":',
                dumps(stored.input_items),
                b',"messages":',
                dumps(stored.messages),
                b',"owner":',
                dumps(stored.owner),
                b',"taint":',
                dumps(stored.taint),
                b"}",
            )
        )
        key = self._keys.response(tenant, stored.response["id"])
        try:
            await self._store.put(key, value, self._ttl_s)
        except StoreUnavailable:
            logger.warning("response %s not stored: store unavailable", stored.response["id"])
            return False
        return True

    async def load(self, tenant: str, response_id: str) -> StoredResponse | None:
        value = await self._store.get(self._keys.response(tenant, response_id))
        found = loads_object(value) if value is not None else None
        if found is None:
            return None
        taint = found.get("taint")
        return StoredResponse(
            found["response"],
            found["input_items"],
            found["messages"],
            found.get("owner", ""),
            taint if isinstance(taint, str) else None,
        )

    async def delete(self, tenant: str, response_id: str) -> bool:
        key = self._keys.response(tenant, response_id)
        if await self._store.get(key) is None:
            return False
        await self._store.delete([key])
        return True
