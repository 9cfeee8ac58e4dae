"""Tool search's dense vectors from the operator's embeddings model (docs/tools.md,
"Tool search"; docs/design.md §17).

``tool_search.embeddings`` names a model on an ``openai`` upstream; the gateway asks its
``POST /v1/embeddings``. A snapshot's catalog is embedded once, in the background: the
vectors already kept in the store (by model and tool text, so replicas and the next
snapshot share them) are read, the rest computed in batches and kept; the matrix is
built off the event loop and attached to the snapshot's index. Until then, and whenever
the model is slow or down, search ranks by words alone (BM25). A request's texts (its
last user message and its parts) are one call, bounded by ``timeout_ms``.

Everything the model server answers is hostile: a body is read up to a bound, parsed
strictly (one finite vector per text, all of one width) and normalised here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from gateway.config import EmbeddingsConfig, GatewayConfig, UpstreamConfig
from gateway.errors import StoreUnavailable, UpstreamError
from gateway.ops.metrics import Metrics
from gateway.ops.offload import offload
from gateway.policy.tool_search import Catalog
from gateway.store.vectors import VectorStore
from gateway.upstream.exchange import UpstreamClient
from gateway.values import Message
from tool_registry import ToolIndex

logger = logging.getLogger("toolgate.tool_search")

MAX_WIDTH = 8192  # the widest vector taken
_BODY_BYTES = 64 * 1024 * 1024  # the most of an answer read
_PROGRESS_EVERY_S = 30.0  # how often a long catalog's embedding says how far it is
PROBE_QUERY = "what is the weather like in Paris tomorrow"  # a request's typical text
_STORE_ATTEMPTS = 3  # reads of the kept vectors, when the store does not answer
_STORE_PAUSE_S = 1.5  # between them (past the store guard's own pause)
_RETRY_AFTER_S = 60.0  # a catalog that could not be embedded is tried again after this


class EmbeddingsFailed(Exception):
    """The embeddings model gave no usable vectors (said in the log, never to a client)."""


def parse_vectors(body: bytes, count: int) -> list[list[float]]:
    """The vectors of an OpenAI embeddings answer for ``count`` texts, in the texts'
    order. Raises ``EmbeddingsFailed`` for anything else."""
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise EmbeddingsFailed("the answer is not JSON") from exc
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list) or len(data) != count:
        raise EmbeddingsFailed(f"expected {count} embeddings in 'data'")
    out: list[list[float] | None] = [None] * count
    width = None
    for place, item in enumerate(data):
        if not isinstance(item, dict):
            raise EmbeddingsFailed("an embedding is not an object")
        at = item.get("index", place)
        vector = item.get("embedding")
        if not isinstance(at, int) or isinstance(at, bool) or not 0 <= at < count:
            raise EmbeddingsFailed("an embedding's index is out of range")
        if out[at] is not None:
            raise EmbeddingsFailed("two embeddings have one index")
        if not isinstance(vector, list) or not 0 < len(vector) <= MAX_WIDTH:
            raise EmbeddingsFailed("an embedding is not a list of numbers")
        if width is None:
            width = len(vector)
        if len(vector) != width:
            raise EmbeddingsFailed("embeddings of different widths")
        for value in vector:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise EmbeddingsFailed("an embedding holds something not a number")
            if not math.isfinite(value):
                raise EmbeddingsFailed("an embedding holds a number that is not finite")
        out[at] = vector
    return [vector for vector in out if vector is not None]


def _unit_rows(vectors: Sequence[Sequence[float]] | Sequence[bytes]) -> Any:
    """The vectors as the rows of a float32 matrix, each of length 1 (0 stays 0)."""
    import numpy as np

    if vectors and isinstance(vectors[0], bytes):
        matrix = np.stack([np.frombuffer(v, dtype="<f4") for v in vectors])  # type: ignore[arg-type]
    else:
        matrix = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.maximum(norms, 1e-12)).astype(np.float32)


class Meanings:
    """The gateway's embeddings client for tool search, across reloads."""

    def __init__(self, client: UpstreamClient, vectors: VectorStore, metrics: Metrics) -> None:
        self._client = client
        self._vectors = vectors
        self._metrics = metrics
        # The indexes whose catalog is being (or was) embedded, with when (an old
        # snapshot's index is not kept alive by it).
        self._started: weakref.WeakKeyDictionary[ToolIndex, float] = weakref.WeakKeyDictionary()
        self._tasks: set[asyncio.Task[None]] = set()
        self._one_at_a_time = asyncio.Lock()
        # The vectors of the catalog embedded last, by text (a reload reuses them).
        self._last: dict[str, bytes] = {}
        self._last_model = ""

    async def _embed(
        self,
        upstream: UpstreamConfig,
        settings: EmbeddingsConfig,
        texts: Sequence[str],
        timeout_s: float,
        kind: str,
    ) -> list[list[float]]:
        started = time.perf_counter()
        outcome = "error"
        try:
            async with asyncio.timeout(timeout_s):
                body = orjson.dumps({"model": settings.model, "input": list(texts)})
                response = await self._client.send(upstream, "/embeddings", body)
                try:
                    if response.status_code != 200:
                        raise EmbeddingsFailed(f"HTTP {response.status_code}")
                    read = bytearray()
                    async for chunk in response.aiter_raw():
                        read += chunk
                        if len(read) > _BODY_BYTES:
                            raise EmbeddingsFailed("the answer is too large")
                finally:
                    await response.aclose()
            vectors = await offload(len(read) > 65_536, parse_vectors, bytes(read), len(texts))
            outcome = "ok"
            return vectors
        except TimeoutError:
            outcome = "timeout"
            raise EmbeddingsFailed(f"no answer within {timeout_s:g} s") from None
        except UpstreamError as exc:
            raise EmbeddingsFailed(type(exc).__name__) from exc
        finally:
            self._metrics.embeddings.labels(kind, outcome).inc()
            self._metrics.embedding_seconds.labels(kind).observe(time.perf_counter() - started)

    def warm(self, config: GatewayConfig, index: ToolIndex) -> None:
        """Start embedding ``index``'s catalog (once, in the background), where
        embeddings are configured and an event loop runs."""
        upstream, settings = config.embedding_upstream, config.tool_search.embeddings
        if upstream is None or settings is None or index.has_vectors or not len(index):
            return
        started = self._started.get(index)
        now = time.monotonic()
        if started is not None and now - started < _RETRY_AFTER_S:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._started[index] = now
        task = loop.create_task(self._catalog(upstream, settings, index))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _catalog(
        self, upstream: UpstreamConfig, settings: EmbeddingsConfig, index: ToolIndex
    ) -> None:
        async with self._one_at_a_time:  # a snapshot after another reuses its vectors
            await self._embed_catalog(upstream, settings, index)

    async def _embed_catalog(
        self, upstream: UpstreamConfig, settings: EmbeddingsConfig, index: ToolIndex
    ) -> None:
        texts = list(index.texts().values())
        last = self._last if self._last_model == settings.model else {}
        kept: list[bytes | None] = [last.get(text) for text in texts]
        unknown = [at for at, v in enumerate(kept) if v is None]
        if unknown:
            stored = await self._kept(settings.model, [texts[at] for at in unknown])
            for at, value in zip(unknown, stored, strict=True):
                kept[at] = value
        width = next((len(v) for v in kept if v is not None), None)
        missing = [at for at, v in enumerate(kept) if v is None or len(v) != width]
        unstored: list[int] = []
        self._metrics.catalog_tools_left.set(len(missing))
        said = time.monotonic()
        try:
            for start in range(0, len(missing), settings.batch):
                batch = missing[start : start + settings.batch]
                computed = await self._embed(
                    upstream,
                    settings,
                    [texts[at] for at in batch],
                    settings.catalog_timeout_s,
                    "catalog",
                )
                done = start + len(batch)
                self._metrics.catalog_tools_left.set(len(missing) - done)
                if time.monotonic() - said >= _PROGRESS_EVERY_S and done < len(missing):
                    said = time.monotonic()
                    logger.info(
                        "tool search: %d of %d tools embedded with %s so far",
                        done,
                        len(missing),
                        settings.model,
                    )
                for at, vector in zip(batch, computed, strict=True):
                    raw = _unit_rows([vector]).tobytes()
                    if width is None:
                        width = len(raw)
                    if len(raw) != width:
                        raise EmbeddingsFailed("embeddings of different widths")
                    kept[at] = raw
                    try:
                        await self._vectors.put(settings.model, texts[at], raw)
                    except StoreUnavailable:  # tried again at the end
                        unstored.append(at)
            if unstored:  # the store had a blip: once more, after its own pause
                await asyncio.sleep(_STORE_PAUSE_S)
                for at in unstored:
                    value = kept[at]
                    if value is not None:
                        with contextlib.suppress(StoreUnavailable):  # kept here all the same
                            await self._vectors.put(settings.model, texts[at], value)
            rows = [v for v in kept if v is not None]
            index.attach(await offload(True, _unit_rows, rows))
            self._last_model = settings.model
            self._last = {text: v for text, v in zip(texts, kept, strict=True) if v is not None}
            self._metrics.embedded_tools.set(len(rows))
            logger.info(
                "tool search: %d tools embedded with %s (%d from the store)",
                len(texts),
                settings.model,
                len(texts) - len(missing),
            )
        except EmbeddingsFailed as exc:
            logger.warning(
                "tool search: the catalog could not be embedded with %s on upstream %s "
                "(%s); searching by words alone, trying again later",
                settings.model,
                upstream.name,
                exc,
            )

    async def _kept(self, model: str, texts: list[str]) -> list[bytes | None]:
        """The vectors the store keeps for ``texts``; a store that does not answer is
        asked again after a pause (this is background work), then none are."""
        for attempt in range(_STORE_ATTEMPTS):
            try:
                return await self._vectors.get_many(model, texts)
            except StoreUnavailable:
                if attempt + 1 < _STORE_ATTEMPTS:
                    await asyncio.sleep(_STORE_PAUSE_S)
        return [None] * len(texts)

    async def of_request(
        self, config: GatewayConfig, catalog: Catalog, history: Sequence[Message]
    ) -> Mapping[str, Any] | None:
        """The vectors of a request's texts (``Catalog.texts_to_embed``): None when
        embeddings are off, the catalog is not embedded yet, or the model did not
        answer in time (the request is then searched by words alone)."""
        upstream, settings = config.embedding_upstream, config.tool_search.embeddings
        index = catalog.tool.index
        if upstream is None or settings is None:
            return None
        if not index.has_vectors:
            self.warm(config, index)
            return None
        texts = catalog.texts_to_embed(history)
        if not texts:
            return None
        try:
            vectors = await self._embed(
                upstream, settings, texts, settings.timeout_ms / 1000, "query"
            )
        except EmbeddingsFailed:
            return None
        rows = _unit_rows(vectors)
        if rows.shape[1] != index.width:
            return None
        return dict(zip(texts, rows, strict=True))

    async def timed(self, config: GatewayConfig) -> tuple[float, str | None] | None:
        """How long the embeddings model takes for one request's text, in seconds, and
        why it failed if it did (waiting up to ten times a request's ``timeout_ms``);
        None when tool search has no embeddings model."""
        upstream, settings = config.embedding_upstream, config.tool_search.embeddings
        if upstream is None or settings is None:
            return None
        started = time.perf_counter()
        try:
            await self._embed(upstream, settings, [PROBE_QUERY], settings.timeout_ms / 100, "probe")
        except EmbeddingsFailed as exc:
            return time.perf_counter() - started, str(exc)
        return time.perf_counter() - started, None

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
