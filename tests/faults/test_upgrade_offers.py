"""An offer to switch protocols (``Upgrade: h2c``, as curl's ``--http2`` and Java's own
client send on ``http://``) is served as the plain HTTP/1.1 request it also is, body
and all, by the protocol ``toolgate serve`` runs (``gateway/cli/protocol.py``): the app
sees the request without the offer, whatever the packets' boundaries, and whatever the
client sends after it on the same connection."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from gateway.cli.protocol import without_offer
from tests.support.recorder import Answer, Recorder
from tests.support.scripted import MODEL, TENANT_KEY, Harness, Model, chat, config
from tests.support.servers import ServeProcess, ServerThread

OFFER = (
    b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
    b"HTTP2-Settings: AAEAAEAAAAIAAAAAAAMAAAAAAAQBAAAAAAUAAEAAAAYABgAA\r\n"
)


def _post(path: bytes, body: bytes, *, offer: bytes = OFFER, chunked: bool = False) -> bytes:
    framing = (
        b"Transfer-Encoding: chunked\r\n" if chunked else b"Content-Length: %d\r\n" % len(body)
    )
    if chunked:
        body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    return (
        b"POST "
        + path
        + b" HTTP/1.1\r\nHost: gw\r\n"
        + offer
        + b"Content-Type: application/json\r\n"
        + framing
        + b"\r\n"
        + body
    )


def _answers(server: ServerThread, *pieces: bytes, count: int) -> list[bytes]:
    """Send ``pieces`` one by one (separate packets), then read ``count`` answers."""
    with socket.create_connection((server.host, server.port), timeout=30) as connection:
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for piece in pieces:
            connection.sendall(piece)
        replies: list[bytes] = []
        buffer = b""
        while len(replies) < count:
            head, found, rest = buffer.partition(b"\r\n\r\n")
            if found:
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                if len(rest) >= length:
                    replies.append(head + b"\r\n\r\n" + rest[:length])
                    buffer = rest[length:]
                    continue
            chunk = connection.recv(65536)
            assert chunk, f"the connection closed after {len(replies)} answers"
            buffer += chunk
        return replies


@pytest.fixture
def recorder(harness: Harness) -> tuple[Recorder, ServerThread]:
    sized = [("content-type", "application/json"), ("content-length", "11")]
    recorder = Recorder(lambda hit: Answer(body=b'{"ok":true}', headers=sized))
    return recorder, harness.serve(recorder)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("split", [False, True], ids=["one-packet", "head-then-body"])
def test_an_offer_is_served_as_http_1_1_with_its_body(
    recorder: tuple[Recorder, ServerThread], split: bool, chunked: bool
) -> None:
    app, server = recorder
    request = _post(b"/x", b'{"a": 1}', chunked=chunked)
    head, _, body = request.partition(b"\r\n\r\n")
    pieces = (head + b"\r\n\r\n", body) if split else (request,)
    (reply,) = _answers(server, *pieces, count=1)
    assert reply.startswith(b"HTTP/1.1 200")
    (hit,) = app.hits
    assert hit.body == b'{"a": 1}'
    assert "upgrade" not in hit.headers
    assert "http2-settings" not in hit.headers
    assert "connection" not in hit.headers  # it named the offer only


def test_what_follows_an_offer_on_the_connection_is_served_too(
    recorder: tuple[Recorder, ServerThread],
) -> None:
    """A pipelined plain request after the offer, and two thousand offers in one packet:
    each answered, in order (a loop, not a frame per offer)."""
    app, server = recorder
    plain = b"GET /after HTTP/1.1\r\nHost: gw\r\n\r\n"
    _answers(server, _post(b"/first", b"[1]") + plain, count=2)
    assert [(h.raw_path, h.body) for h in app.hits] == [("/first", b"[1]"), ("/after", b"")]
    app.clear()
    many = b"".join(_post(b"/%d" % i, b"[%d]" % i) for i in range(2000))
    replies = _answers(server, many, count=2000)
    assert all(r.startswith(b"HTTP/1.1 200") for r in replies)
    assert [h.body for h in app.hits] == [b"[%d]" % i for i in range(2000)]


def test_connection_keeps_what_the_offer_did_not_name() -> None:
    headers = [
        (b"connection", b"keep-alive, Upgrade, HTTP2-Settings"),
        (b"upgrade", b"h2c"),
        (b"http2-settings", b"AAA"),
        (b"x-other", b"1"),
    ]
    assert without_offer(headers) == [(b"connection", b"keep-alive"), (b"x-other", b"1")]


def _curl() -> str:
    found = shutil.which("curl")
    if found is None:
        pytest.fail("curl is needed: apt-get install curl")
    return found


@pytest.mark.parametrize(
    "offer",
    [
        ["--http2"],  # curl's own h2c offer
        [
            "-H",
            "Connection: Upgrade, HTTP2-Settings",
            "-H",
            "Upgrade: h2c",
            "-H",
            "HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA",
        ],
    ],
    ids=["curl-http2", "raw-headers"],
)
def test_curl_offering_h2c_gets_a_chat_completion(harness: Harness, offer: list[str]) -> None:
    model = Model()
    gateway = harness.gateway(config(harness.serve(model.recorder).url, []))
    done = subprocess.run(
        [
            _curl(),
            "-sS",
            "-v",
            *offer,
            f"{gateway.url}/v1/chat/completions",
            "-H",
            f"Authorization: Bearer {TENANT_KEY}",
            "-H",
            "Content-Type: application/json",
            "--data",
            json.dumps(chat()),
        ],
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert b"upgrade: h2c" in done.stderr.lower()  # curl did offer it
    assert json.loads(done.stdout)["choices"][0]["message"]["content"] == "done"
    assert model.requests[0]["messages"] == chat()["messages"]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_toolgate_serve_serves_an_offer(tmp_path: Path, harness: Harness, workers: str) -> None:
    model = Model()
    path = tmp_path / "gateway.yaml"
    path.write_text(json.dumps(config(harness.serve(model.recorder).url, [])))
    served = ServeProcess(path, tmp_path / "log", "--workers", workers)
    try:
        host, port = served.url.removeprefix("http://").split(":")
        body = json.dumps({"model": MODEL, **chat()}).encode()
        request = _post(b"/v1/chat/completions", body).replace(
            b"Host: gw\r\n", b"Host: gw\r\nAuthorization: Bearer " + TENANT_KEY.encode() + b"\r\n"
        )
        head, _, rest = request.partition(b"\r\n\r\n")
        with socket.create_connection((host, int(port)), timeout=30) as connection:
            connection.sendall(head + b"\r\n\r\n")
            connection.sendall(rest)
            reply = b""
            while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
                chunk = connection.recv(65536)
                assert chunk, reply
                reply += chunk
    finally:
        log = served.stop()
    assert reply.startswith(b"HTTP/1.1 200"), reply
    assert json.loads(reply.partition(b"\r\n\r\n")[2])["choices"][0]["message"]["content"] == "done"
    assert "Unsupported upgrade" not in log
