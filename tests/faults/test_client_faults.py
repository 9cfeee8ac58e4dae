"""A client that sends what no SDK would, sends its body too slowly, or leaves early.
Bad input is a 400 envelope; a slow body a 408; a client that leaves stops the work
it started (the tool sees its caller go, no further upstream round is made)."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_tools import FakeTools
from tests.support.scripted import (
    MODEL,
    OTHER_KEY,
    TENANT_KEY,
    Harness,
    Model,
    asks,
    assert_envelope,
    call,
    chat,
    config,
    tool,
)
from tests.support.servers import ServeProcess, ServerThread, wait_for


@pytest.mark.parametrize(
    "tools",
    [
        [{"type": "custom", "custom": "x"}],
        [{"type": "custom", "custom": 5}],
        [{"type": "custom", "custom": ["x"]}],
        [{"type": "custom", "custom": {"name": 5}}],
        [{"type": "custom"}],
        [{"type": "function", "function": "x"}],
        [{"type": "function", "function": {"name": ["x"]}}],
        [{"type": "function"}],
        [{"type": 5}],
        [5],
        ["x"],
        "x",
        {"type": "function"},
    ],
    ids=lambda t: json.dumps(t)[:50],
)
@pytest.mark.parametrize("key", [TENANT_KEY, OTHER_KEY], ids=["with-tools", "no-tools"])
def test_a_client_tool_of_any_wrong_shape_is_a_400(harness: Harness, tools: Any, key: str) -> None:
    model = Model()
    gateway = harness.gateway(
        config(harness.serve(model.recorder).url, [tool("t", "http://127.0.0.1:9/t")])
    )
    answer = harness.client(gateway, key=key).post("/v1/chat/completions", json=chat(tools=tools))
    assert_envelope(answer, 400)
    assert model.recorder.hits == []


def _raw_request(body: bytes, key: str = TENANT_KEY, length: int | None = None) -> bytes:
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
        b"Authorization: Bearer " + key.encode() + b"\r\n"
        b"Content-Type: application/json\r\n"
        b"Content-Length: " + str(len(body) if length is None else length).encode() + b"\r\n"
        b"\r\n" + body
    )


def test_a_body_that_never_completes_is_a_408(harness: Harness) -> None:
    model = Model()
    gateway = harness.gateway(
        config(harness.serve(model.recorder).url, [], server={"body_timeout_s": 0.5})
    )
    body = json.dumps(chat()).encode()
    with socket.create_connection((gateway.host, gateway.port), timeout=10) as connection:
        connection.sendall(_raw_request(body[:10], length=len(body)))  # the rest never comes
        reply = b""
        while chunk := connection.recv(65536):
            reply += chunk
    head, _, payload = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), head
    error = json.loads(payload)["error"]
    assert error["code"] == "request_body_timeout"
    assert model.recorder.hits == []


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_before_the_first_byte_stops_the_tool_and_the_loop(
    harness: Harness, stream: bool
) -> None:
    tools = FakeTools()
    tools_server: ServerThread = harness.serve(tools.app())
    model = Model(asks(call("hang", {})))
    gateway = harness.gateway(
        config(harness.serve(model.recorder).url, [tool("hang", f"{tools_server.url}/hang")])
    )
    body = json.dumps(chat(stream=stream)).encode()
    connection = socket.create_connection((gateway.host, gateway.port), timeout=10)
    connection.sendall(_raw_request(body))
    assert wait_for(lambda: len(tools.hits) == 1), "the tool was never called"
    connection.close()  # nothing read: gone before the first byte
    assert wait_for(lambda: tools.cancelled == 1), "the tool never saw its caller leave"
    assert wait_for(lambda: tools.running == 0)
    time.sleep(0.2)  # room for a second round, were one to be made
    assert len(model.recorder.hits) == 1
    counted = f'toolgate_requests_total{{model="{MODEL}",status="4xx",tenant="acme"}} 1.0'
    client = harness.client(gateway)
    assert wait_for(lambda: counted in client.get("/metrics").text), "499 not counted"


BAD_HEADER = b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nX-Bad: a\x01b\r\n\r\n"


@pytest.mark.parametrize(
    ("workers", "request_bytes"),
    [
        ("1", BAD_HEADER),
        ("1", b"GARBAGE\r\n\r\n"),
        ("1", b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: x\r\n\r\n"),
        ("2", BAD_HEADER),  # the workers' processes use the same protocol class
    ],
)
def test_unparseable_http_gets_the_envelope_from_toolgate_serve(
    tmp_path: Path, harness: Harness, workers: str, request_bytes: bytes
) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(json.dumps(config(harness.serve(Model().recorder).url, [])))
    served = ServeProcess(path, tmp_path / "log", "--workers", workers)
    try:
        host, port = served.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as connection:
            connection.sendall(request_bytes)
            reply = b""
            while chunk := connection.recv(65536):
                reply += chunk
    finally:
        log = served.stop()
    head, _, payload = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), reply
    assert b"content-type: application/json" in head.lower()
    error = json.loads(payload)["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_http")
    assert "Traceback" not in log
