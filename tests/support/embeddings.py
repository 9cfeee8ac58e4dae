"""A deterministic embeddings server for tool search's tests: OpenAI's
``POST /v1/embeddings``, answering each text with a vector of its words hashed into 512
dimensions (a few words folded together first, as a model's sense of meaning would:
"festival" and "events" land on one dimension), and recording every request.

``mode`` decides the answer: ``ok``; ``hang`` (until ``release``); ``down`` (HTTP
500); ``garbage`` (a vector too few); ``slow`` (after ``delay_s``). A mode can be set
for query requests alone (``query_mode``), told apart from the catalog's by their
texts."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import threading
from collections.abc import Callable
from typing import Any

from starlette.types import Receive, Scope, Send

from .recorder import read_all

WIDTH = 512
COMMON = frozenset(
    [
        "a",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "get",
        "in",
        "is",
        "it",
        "of",
        "on",
        "or",
        "the",
        "this",
        "to",
        "what",
        "with",
    ]
)  # words that carry no meaning here
SENSES = {  # words a model would read as one meaning
    "festival": "event",
    "festivals": "event",
    "concert": "event",
    "events": "event",
    "event": "event",
    "gig": "event",
    "happening": "event",
}


def vector(text: str) -> list[float]:
    out = [0.0] * WIDTH
    for word in re.findall(r"[a-z]+", text.lower()):
        if word in COMMON:
            continue
        sense = SENSES.get(word, word)
        digest = hashlib.sha256(sense.encode()).digest()
        out[digest[0] % WIDTH] += 1.0
    return out


class Embeddings:
    """The server (an ASGI app)."""

    def __init__(self, is_query: Callable[[list[str]], bool] = lambda texts: False) -> None:
        self.mode = "ok"
        self.query_mode: str | None = None
        self.delay_s = 0.0
        self.requests: list[list[str]] = []
        self._is_query = is_query
        self._lock = threading.Lock()
        self._released = threading.Event()

    def release(self) -> None:
        """Let hanging requests end (before the server stops)."""
        self._released.set()

    def texts(self) -> list[str]:
        with self._lock:
            return [text for request in self.requests for text in request]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = json.loads(await read_all(receive))
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        with self._lock:
            self.requests.append(list(texts))
        mode = self.mode
        if self.query_mode is not None and self._is_query(texts):
            mode = self.query_mode
        if mode == "hang":
            await asyncio.to_thread(self._released.wait)
        if mode == "slow":
            await asyncio.to_thread(self._released.wait, self.delay_s)
        if mode == "down":
            await _send(send, 500, b'{"error":{"message":"the model is not loaded"}}')
            return
        data: list[dict[str, Any]] = [
            {"object": "embedding", "index": i, "embedding": vector(t)} for i, t in enumerate(texts)
        ]
        if mode == "garbage":
            data = data[:-1]
        answer = {"object": "list", "data": data, "model": "fake", "usage": {}}
        await _send(send, 200, json.dumps(answer).encode())


async def _send(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
