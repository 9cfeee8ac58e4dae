"""The tool-result cache: GET tools with ``cache_ttl_s`` keep their results in the
store, per tenant, keyed by the tool's definition (its fingerprint: a reload that
points a name elsewhere starts afresh), canonical arguments and bound values."""

from __future__ import annotations

import logging

from gateway.ops.metrics import Metrics
from gateway.store import GuardedStore, Keys, StoreUnavailable
from tool_registry import PreparedCall, ToolResult, dumps, loads

logger = logging.getLogger("gateway.result_cache")


class ResultCache:
    def __init__(self, store: GuardedStore, keys: Keys, metrics: Metrics | None = None) -> None:
        self._store = store
        self._metrics = metrics
        self._keys = keys
        self.hits = 0

    async def get(self, tenant: str, call: PreparedCall) -> ToolResult | None:
        """A cached result, or None (a store failure is a miss, never an error)."""
        try:
            value = await self._store.get(self._key(tenant, call))
        except StoreUnavailable:
            value = None
        if value is None:
            self._count("miss")
            return None
        self.hits += 1
        self._count("hit")
        saved = loads(value)
        whole, max_chars = saved.get("whole"), saved.get("max_chars")
        if isinstance(whole, str) and isinstance(max_chars, int):  # cut: screened whole
            return ToolResult(saved["content"], "ok", saved.get("status"), None, whole, max_chars)
        return ToolResult(saved["content"], "ok", saved.get("status"))

    def _key(self, tenant: str, call: PreparedCall) -> str:
        return self._keys.tool_result(tenant, f"{call.tool.fingerprint}:{call.key}")

    def _count(self, result: str) -> None:
        if self._metrics is not None:
            self._metrics.cache_lookups.labels(result).inc()

    async def put(self, tenant: str, call: PreparedCall, result: ToolResult, ttl_s: float) -> None:
        kept: dict[str, object] = {"content": result.content, "status": result.status}
        if result.whole is not None:  # what the guardrails read before its cut
            kept |= {"whole": result.whole, "max_chars": result.max_chars}
        value = dumps(kept)
        try:
            await self._store.put(self._key(tenant, call), value, ttl_s)
        except StoreUnavailable:
            logger.warning("result of %s not cached: store unavailable", call.tool.name)
