"""A minimal HTTP/1.1 keep-alive server on asyncio streams, for the benchmark's fakes.

It only has to be much cheaper than what it serves: no chunked request bodies, no
pipelining, one request at a time per connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

_REASONS = {200: b"OK", 404: b"Not Found", 400: b"Bad Request"}


@dataclass(frozen=True, slots=True)
class Request:
    method: bytes
    target: bytes
    body: bytes


class Responder:
    """Writes one response: whole (``send``) or as a chunked stream."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    def send(self, status: int, body: bytes, content_type: bytes = b"application/json") -> None:
        self._writer.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s"
            % (status, _REASONS.get(status, b"OK"), content_type, len(body), body)
        )

    def start_stream(self, content_type: bytes = b"text/event-stream") -> None:
        self._writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ntransfer-encoding: chunked\r\n\r\n"
            % content_type
        )

    async def chunk(self, data: bytes) -> None:
        self._writer.write(b"%x\r\n%s\r\n" % (len(data), data))
        await self._writer.drain()

    async def end_stream(self) -> None:
        self._writer.write(b"0\r\n\r\n")
        await self._writer.drain()


Handler = Callable[[Request, Responder], Awaitable[None]]


async def _connection(
    handler: Handler, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    responder = Responder(writer)
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            method, target, _ = lines[0].split(b" ", 2)
            length = 0
            for line in lines[1:]:
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            body = await reader.readexactly(length) if length else b""
            await handler(Request(method, target, body), responder)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def serve(handler: Handler, host: str, port: int) -> None:
    server = await asyncio.start_server(
        lambda r, w: _connection(handler, r, w), host, port, backlog=4096, limit=1 << 20
    )
    async with server:
        await server.serve_forever()


def run(handler: Handler, host: str, port: int) -> None:
    """Serve forever, on uvloop when it is installed."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(handler, host, port))
    else:
        uvloop.run(serve(handler, host, port))
