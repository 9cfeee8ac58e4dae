"""Request traces (docs/design.md §9): the hidden rounds of a request — upstream calls with
timings and usage, tool calls with arguments, outcome and a cut result — kept in the
store for the tenant to read back at ``GET /v1/toolgate/traces/{request_id}``.

A trace of a request a user made names its ``owner`` (a digest of the caller's
identity): only a caller of that identity reads it or its recording through the
tenant's routes (docs/security.md, "What a user's requests keep is theirs")."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.store import GuardedStore, Keys
from gateway.store.base import settled_now
from tool_registry import dumps, loads

logger = logging.getLogger("gateway.traces")


class TraceStore:
    def __init__(
        self,
        store: GuardedStore,
        keys: Keys,
        ttl_s: float,
        result_chars: int,
        settled: Callable[[], Awaitable[None]] = settled_now,
    ) -> None:
        self._store = store
        self._settled = settled  # this replica's answered requests' writes, done
        self._keys = keys
        self._ttl_s = ttl_s
        self.result_chars = result_chars

    @property
    def ttl_s(self) -> float:
        return self._ttl_s

    async def save(
        self, tenant: str, request_id: str, trace: dict[str, Any], ttl_s: float | None = None
    ) -> None:
        """Keep a trace for ``traces.ttl_s``, or ``ttl_s`` (one carrying a recording);
        StoreUnavailable when the store did not take it (the writes after an answer are
        tried again: ``Afterwards``)."""
        key = self._keys.trace(tenant, request_id)
        await self._store.put(key, dumps(trace), ttl_s or self._ttl_s)

    async def load(self, tenant: str, request_id: str) -> dict[str, Any] | None:
        await self._settled()  # a trace is there once its answer has arrived
        value = await self._store.get(self._keys.trace(tenant, request_id))
        return None if value is None else dict(loads(value))

    async def index_recording(
        self, tenant: str, request_id: str, recorded_at: float, ttl_s: float
    ) -> None:
        """Name a trace that carries a recording in the tenant's index (kept ``ttl_s``
        after the last one), for the export; StoreUnavailable as ``save``."""
        key = self._keys.recordings(tenant)
        await self._store.field_put(key, request_id, str(recorded_at).encode(), ttl_s)

    async def recordings(
        self, tenant: str, limit: int, owner: str | None = None
    ) -> list[dict[str, Any]]:
        """The tenant's recordings still kept that ``owner`` may read (those of no
        owner's and its own), oldest first, at most ``limit`` (the newest); the index
        forgets those whose trace has expired."""
        await self._settled()  # the recordings of this replica's answered requests
        key = self._keys.recordings(tenant)
        index = await self._store.fields(key)
        newest = sorted(index.items(), key=lambda item: float(item[1] or b"0"), reverse=True)
        found: list[dict[str, Any]] = []
        while newest and len(found) < limit:
            named, newest = newest[:limit], newest[limit:]
            values = await self._store.get_many([self._keys.trace(tenant, n) for n, _ in named])
            for (request_id, _), value in zip(named, values, strict=True):
                trace = loads(value) if value is not None else None
                recording = trace.get("recording") if isinstance(trace, dict) else None
                if not isinstance(recording, dict) or not recording.get("kept"):
                    await self._store.field_delete(key, request_id)
                    continue
                assert isinstance(trace, dict)
                if len(found) < limit and readable_by(trace, owner):
                    found.append({"request_id": request_id, **recording})
        return found[::-1]


def readable_by(trace: dict[str, Any], owner: str | None) -> bool:
    """Whether a caller of ``owner`` may read ``trace`` through the tenant's routes."""
    kept = trace.get("owner")
    return kept is None or kept == owner
