"""Request traces (DESIGN.md §9): the hidden rounds of a request — upstream calls with
timings and usage, tool calls with arguments, outcome and a cut result — kept in the
store for the tenant to read back at ``GET /v1/toolgate/traces/{request_id}``."""

from __future__ import annotations

import logging
from typing import Any

from gateway.store import GuardedStore, Keys, StoreUnavailable
from tool_registry import dumps, loads

logger = logging.getLogger("gateway.traces")


class TraceStore:
    def __init__(self, store: GuardedStore, keys: Keys, ttl_s: float, result_chars: int) -> None:
        self._store = store
        self._keys = keys
        self._ttl_s = ttl_s
        self.result_chars = result_chars

    @property
    def ttl_s(self) -> float:
        return self._ttl_s

    async def save(
        self, tenant: str, request_id: str, trace: dict[str, Any], ttl_s: float | None = None
    ) -> None:
        """Keep a trace for ``traces.ttl_s``, or ``ttl_s`` (one carrying a recording)."""
        key = self._keys.trace(tenant, request_id)
        try:
            await self._store.put(key, dumps(trace), ttl_s or self._ttl_s)
        except StoreUnavailable:
            logger.warning("trace of %s not saved: store unavailable", request_id)

    async def load(self, tenant: str, request_id: str) -> dict[str, Any] | None:
        value = await self._store.get(self._keys.trace(tenant, request_id))
        return None if value is None else dict(loads(value))
