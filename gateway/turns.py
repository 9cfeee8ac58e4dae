"""Saved tool turns (DESIGN.md §6): when one assistant message asks for server and
client tools, the server side of it is kept in the store under the client calls' ids
and put back when the client returns with its results — on any replica."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from tool_registry.jsonio import dumps, loads

from .metrics import Metrics
from .store import GuardedStore, Keys, StoreUnavailable

logger = logging.getLogger("gateway.turns")

_MARK_TTL_FACTOR = 24  # "there was a hidden turn here" outlives the turn itself


class TurnStore:
    def __init__(
        self, store: GuardedStore, keys: Keys, ttl_s: float, metrics: Metrics | None = None
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._keys = keys
        self._ttl_s = ttl_s
        self.saved = 0
        self.restored = 0
        self.misses = 0  # hidden turns that were gone (expired, or the store was down)

    async def save(
        self,
        tenant: str,
        assistant: dict[str, Any],
        results: list[dict[str, Any]],
        client_ids: list[str],
    ) -> None:
        """Keep the full assistant message and the server results, under each client id."""
        value = dumps({"assistant": assistant, "results": results})
        writes = []
        for call_id in client_ids:
            writes.append(self._store.put(self._keys.turn(tenant, call_id), value, self._ttl_s))
            writes.append(
                self._store.put(self._mark(tenant, call_id), b"1", self._ttl_s * _MARK_TTL_FACTOR)
            )
        try:
            await asyncio.gather(*writes)
        except StoreUnavailable:
            logger.warning("hidden turn of tenant %s not saved: store unavailable", tenant)
            return
        self.saved += 1

    def _missed(self) -> None:
        self.misses += 1
        if self._metrics is not None:
            self._metrics.turn_misses.inc()

    def _mark(self, tenant: str, call_id: str) -> str:
        return self._keys.turn(tenant, call_id) + ":mark"

    async def restore(
        self, tenant: str, messages: list[dict[str, Any]]
    ) -> list[dict[str, Any]] | None:
        """The history with every saved hidden turn put back, or None if none applies."""
        places = [
            (index, [str(c.get("id")) for c in message["tool_calls"] if isinstance(c, dict)])
            for index, message in enumerate(messages)
            if message.get("role") == "assistant" and isinstance(message.get("tool_calls"), list)
        ]
        ids = [call_id for _, call_ids in places for call_id in call_ids]
        if not ids:
            return None
        keys = [self._keys.turn(tenant, i) for i in ids] + [self._mark(tenant, i) for i in ids]
        try:
            values = await self._store.get_many(keys)
        except StoreUnavailable:
            self._missed()
            logger.warning("hidden turns of tenant %s not restored: store unavailable", tenant)
            return None
        turns = dict(zip(ids, values[: len(ids)], strict=True))
        marks = dict(zip(ids, values[len(ids) :], strict=True))
        by_index = dict(places)
        restored: list[dict[str, Any]] = []
        changed = False
        for index, message in enumerate(messages):
            call_ids = by_index.get(index, [])
            saved = next((turns[i] for i in call_ids if turns[i] is not None), None)
            if saved is None:
                if any(marks[i] is not None for i in call_ids):
                    self._missed()
                    logger.info("a hidden turn of tenant %s has expired", tenant)
                restored.append(message)
                continue
            turn = loads(saved)
            restored.append(turn["assistant"])
            restored.extend(turn["results"])
            changed = True
        if not changed:
            return None
        self.restored += 1
        return restored
