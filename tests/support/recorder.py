"""Servers that record exactly what reached them, for asserting the far side.

``Recorder`` is a raw ASGI app: every request's method, raw path (as it came on the
request line, before any decoding), headers and body are kept, and a test decides
the answer with ``respond``. ``RawServer`` is a TCP server that answers whatever
bytes it is given, HTTP or not.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.types import Receive, Scope, Send


@dataclass(frozen=True)
class Received:
    method: str
    raw_path: str  # path and query exactly as sent
    headers: dict[str, str]
    body: bytes
    # Every header as it came, in order, repeats included (``headers`` keeps the last).
    header_list: tuple[tuple[str, str], ...] = ()

    def all_values(self, name: str) -> list[str]:
        """Every value a header arrived with (any letter case of its name)."""
        return [v for k, v in self.header_list if k.lower() == name.lower()]

    @property
    def text(self) -> str:
        """Everything received, as one text to search."""
        head = "\n".join(f"{k}: {v}" for k, v in self.headers.items())
        return f"{self.method} {self.raw_path}\n{head}\n\n{self.body.decode(errors='replace')}"


@dataclass
class Answer:
    status: int = 200
    body: bytes = b'{"ok":true}'
    headers: list[tuple[str, str]] = field(
        default_factory=lambda: [("content-type", "application/json")]
    )
    chunks: list[bytes] | None = None  # sent one by one instead of ``body``


Respond = Callable[[Received], Answer]


async def read_all(receive: Receive) -> bytes:
    """A request's whole body."""
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    return body


class Recorder:
    def __init__(self, respond: Respond | None = None) -> None:
        self.hits: list[Received] = []
        self.respond: Respond = respond or (lambda hit: Answer())
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self.hits.clear()

    def all_text(self) -> str:
        with self._lock:
            return "\n".join(hit.text for hit in self.hits)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                while (await receive())["type"] != "lifespan.shutdown":
                    await send({"type": "lifespan.startup.complete"})
                await send({"type": "lifespan.shutdown.complete"})
            return
        body = await read_all(receive)
        raw_path = scope["raw_path"].decode("latin-1")
        if scope.get("query_string"):
            raw_path += "?" + scope["query_string"].decode("latin-1")
        pairs = tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"])
        hit = Received(scope["method"], raw_path, dict(pairs), body, pairs)
        with self._lock:
            self.hits.append(hit)
        answer = self.respond(hit)
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers]
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        for chunk in answer.chunks or [answer.body]:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})


class RawServer:
    """Accepts TCP connections on loopback and answers each with ``reply`` bytes."""

    def __init__(self, reply: bytes, host: str = "127.0.0.1") -> None:
        self.reply = reply
        self.connections = 0
        self._socket = socket.create_server((host, 0))
        self._socket.settimeout(0.2)
        self.url = f"http://{host}:{self._socket.getsockname()[1]}"
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while not self._stopped.is_set():
            try:
                connection, _ = self._socket.accept()
            except TimeoutError:
                continue
            self.connections += 1
            with connection:
                connection.settimeout(2)
                try:
                    connection.recv(65536)
                    connection.sendall(self.reply)
                except OSError:
                    pass

    def __enter__(self) -> RawServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)
        self._socket.close()
