"""Tool search's catalog vectors, kept so that replicas (and the next snapshot) share
them (docs/tools.md, "Tool search"): one key per model and tool text, a vector as
little-endian float32 bytes."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.store.base import Store
from gateway.store.keys import Keys

VECTOR_TTL_S = 30 * 24 * 3600.0  # a tool text unseen for this long is computed anew
_READ_AT_ONCE = 512  # keys read in one round trip


class VectorStore:
    def __init__(self, store: Store, keys: Keys) -> None:
        self._store = store
        self._keys = keys

    async def get_many(self, model: str, texts: Sequence[str]) -> list[bytes | None]:
        """Each text's vector bytes, or None where none is kept."""
        keys = [self._keys.tool_vector(model, text) for text in texts]
        found: list[bytes | None] = []
        for at in range(0, len(keys), _READ_AT_ONCE):
            found.extend(await self._store.get_many(keys[at : at + _READ_AT_ONCE]))
        return found

    async def put(self, model: str, text: str, vector: bytes) -> None:
        await self._store.put(self._keys.tool_vector(model, text), vector, VECTOR_TTL_S)
