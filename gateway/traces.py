"""Request traces (DESIGN.md §9): the hidden rounds of a request — upstream calls with
timings and usage, tool calls with arguments, outcome and a cut result — kept in the
store for the tenant to read back at ``GET /v1/toolgate/traces/{request_id}``."""

from __future__ import annotations

import logging
from typing import Any

from tool_registry import ToolRegistry
from tool_registry.jsonio import dumps, loads

from .store import GuardedStore, Keys, StoreUnavailable
from .tool_runner import CallRecord

logger = logging.getLogger("gateway.traces")

REDACTED = "[redacted]"


def redacted_arguments(registry: ToolRegistry, record: CallRecord) -> dict[str, Any] | None:
    """The call's arguments with every value bound from a request header hidden."""
    if record.arguments is None:
        return None
    tool = registry.get(record.name)
    if tool is None:
        return record.arguments
    hidden = tool.header_bound
    return {k: REDACTED if k in hidden else v for k, v in record.arguments.items()}


class TraceStore:
    def __init__(self, store: GuardedStore, keys: Keys, ttl_s: float, result_chars: int) -> None:
        self._store = store
        self._keys = keys
        self._ttl_s = ttl_s
        self.result_chars = result_chars

    def tool_call(self, registry: ToolRegistry, record: CallRecord) -> dict[str, Any]:
        result = record.result or ""
        if len(result) > self.result_chars:
            result = result[: self.result_chars] + f"…[{len(result) - self.result_chars} more]"
        return {
            "id": record.call_id,
            "name": record.name,
            "arguments": redacted_arguments(registry, record),
            "outcome": record.outcome,
            "status": record.status,
            "duration_ms": round(record.duration_s * 1000, 3),
            "reused": record.reused,
            "cached": record.cached,
            "result": result,
        }

    async def save(self, tenant: str, request_id: str, trace: dict[str, Any]) -> None:
        try:
            await self._store.put(self._keys.trace(tenant, request_id), dumps(trace), self._ttl_s)
        except StoreUnavailable:
            logger.warning("trace of %s not saved: store unavailable", request_id)

    async def load(self, tenant: str, request_id: str) -> dict[str, Any] | None:
        value = await self._store.get(self._keys.trace(tenant, request_id))
        return None if value is None else dict(loads(value))
