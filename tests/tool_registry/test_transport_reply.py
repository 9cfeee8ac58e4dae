"""A tool call's answer read from aiohttp directly (``GatewayTransport.exchange``) says
what httpx's model of the same answer says: status, reason phrase, every header in any
letter case (a repeated one joined with commas), the body whole or capped; an encoded
body still goes through httpx's decoding. Each answer comes from a raw TCP server, so
the bytes are exactly the hostile ones written here."""

from __future__ import annotations

import gzip

import httpx
import pytest

from tests.support.recorder import RawServer
from tool_registry import EgressDenied, create_tool_transport, read_capped, send
from tool_registry.egress import EgressPolicy
from tool_registry.transport import Reply

pytestmark = pytest.mark.anyio

NAMES = [
    "content-type",
    "Content-Type",
    "x-should-retry",
    "X-Should-Retry",
    "retry-after",
    "location",
    "x-absent",
    "set-cookie",
]


def _answer(status: str, headers: list[tuple[str, str]], body: bytes) -> bytes:
    head = "".join(f"{k}: {v}\r\n" for k, v in headers)
    return (
        f"HTTP/1.1 {status}\r\n{head}content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode("latin-1") + body


ANSWERS = {
    "plain": _answer("200 OK", [("content-type", "application/json")], b'{"ok": true}'),
    "repeated headers and an odd phrase": _answer(
        "503 Sl\xf6w D\x7fown",
        [
            ("X-Should-Retry", "true"),
            ("x-should-retry", "false"),
            ("Retry-After", "3"),
            ("content-type", "text/plain; charset=latin-1"),
            ("Set-Cookie", "a=1"),
            ("set-cookie", "b=2"),
        ],
        "caf\xe9 ".encode("latin-1") * 50,
    ),
    "no phrase": _answer("302 ", [("Location", "/next"), ("location", "/other")], b""),
    "gzip": _answer(
        "200 OK",
        [("content-encoding", "gzip"), ("content-type", "application/json")],
        gzip.compress(b'{"big": "' + b"x" * 5000 + b'"}'),
    ),
}


async def _read(
    reply: Reply, cap: int
) -> tuple[int, str, dict[str, tuple[str | None, bool]], bytes, bool]:
    try:
        body, cut = await read_capped(reply, cap)
    finally:
        await reply.aclose()
    said = {name: (reply.headers.get(name), name in reply.headers) for name in NAMES}
    return reply.status_code, reply.reason_phrase, said, body, cut


@pytest.mark.parametrize("name", sorted(ANSWERS))
@pytest.mark.parametrize("cap", [1 << 20, 100])
async def test_aiohttps_answer_reads_as_httpxs_does(name: str, cap: int) -> None:
    transport = create_tool_transport(EgressPolicy(deny_private=False))
    try:
        with RawServer(ANSWERS[name]) as server:
            url = f"{server.url}/tool"
            direct = await transport.exchange(httpx.Request("GET", url))
            assert not isinstance(direct, httpx.Response) or name == "gzip"
            modelled = await send(transport, httpx.Request("GET", url))
            assert isinstance(modelled, httpx.Response)
            assert await _read(direct, cap) == await _read(modelled, cap)
    finally:
        await transport.aclose()


async def test_an_encoded_answer_is_decoded_by_httpx_as_before() -> None:
    transport = create_tool_transport(EgressPolicy(deny_private=False))
    try:
        with RawServer(ANSWERS["gzip"]) as server:
            reply = await transport.exchange(httpx.Request("GET", f"{server.url}/tool"))
            assert isinstance(reply, httpx.Response)
            body, cut = await read_capped(reply, 1 << 20)
            await reply.aclose()
            assert body.startswith(b'{"big": "xxx')
            assert not cut
    finally:
        await transport.aclose()


async def test_the_guard_judges_before_the_direct_path_sends() -> None:
    transport = create_tool_transport(EgressPolicy(deny_private=True))
    try:
        with RawServer(ANSWERS["plain"]) as server:
            with pytest.raises(EgressDenied):
                await transport.exchange(httpx.Request("GET", f"{server.url}/tool"))
            assert server.connections == 0
    finally:
        await transport.aclose()
