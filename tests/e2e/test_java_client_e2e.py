"""The JDK's own HTTP client (``java.net.http``, which LangChain4j talks through) at its
defaults: it offers an upgrade to HTTP/2 (``Upgrade: h2c``) on every new ``http://``
connection and sends the body after the head. The gateway serves each offer as the plain
HTTP/1.1 request it also is: a chat completion with a server tool round, streamed or
not, and a Responses request, each with its body; a bad key is still a 401.

Run with the JDK's source launcher (``java JdkClient.java``); without a JDK the test fails
saying what to install, unless ``TOOLGATE_SKIP_JAVA=1``."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_upstream import calls, say, tool_call, tool_results

from .conftest import ACME_KEY, MODEL, StackFactory

JDK_CLIENT = Path(__file__).resolve().parent.parent / "java" / "JdkClient.java"


def java() -> str:
    found = shutil.which("java")
    if found is None:
        if os.environ.get("TOOLGATE_SKIP_JAVA") == "1":
            pytest.skip("TOOLGATE_SKIP_JAVA=1")
        pytest.fail("a JDK (11+) is needed: apt-get install default-jdk, or TOOLGATE_SKIP_JAVA=1")
    return found


def jdk_requests(
    base: str, key: str, *requests: tuple[str, str, Any]
) -> list[tuple[int, str, bytes]]:
    """Each request made by a new JDK client, then all again by one client: their
    status, HTTP version and body."""
    lines = "".join(
        f"{method}\t{path}\t{json.dumps(body) if body is not None else ''}\n"
        for method, path, body in requests
    )
    done = subprocess.run(
        [java(), str(JDK_CLIENT), base, key],
        input=lines.encode(),
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    answers: list[tuple[int, str, bytes]] = []
    out = done.stdout
    while out:
        head, _, out = out.partition(b"\n")
        status, version, length = head.decode().split()
        answers.append((int(status), version, out[: int(length)]))
        out = out[int(length) + 1 :]
    return answers


def test_the_jdk_client_offers_h2c_with_its_body() -> None:
    """What the other tests rest on: at its defaults the JDK's client offers the upgrade
    on a request with a body (written after the head: on a quiet machine it comes in a
    packet of its own)."""
    heads: list[bytes] = []
    listener = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:  # each connection's head, answered (and closed)
        try:
            while True:
                connection, _ = listener.accept()
                with connection:
                    heads.append(connection.recv(65536))
                    connection.sendall(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}"
                    )
        except OSError:
            return  # the listener closed

    server = threading.Thread(target=answer, daemon=True)
    server.start()
    try:
        port = listener.getsockname()[1]
        done = subprocess.run(
            [java(), str(JDK_CLIENT), f"http://127.0.0.1:{port}", "k"],
            input=b'POST\t/x\t{"a": 1}\n',
            capture_output=True,
            timeout=120,
        )
    finally:
        listener.close()
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    head, _, body = heads[0].lower().partition(b"\r\n\r\n")
    assert b"upgrade: h2c" in head
    assert b"connection: upgrade, http2-settings" in head
    assert b"content-length: 8" in head
    assert body in (b"", b'{"a": 1}')  # not yet read, or read with its head


def _streamed_text(stream: bytes) -> str:
    chunks = [
        json.loads(line[len(b"data: ") :])
        for line in stream.splitlines()
        if line.startswith(b"data: {")
    ]
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def _script(body: dict[str, Any]) -> dict[str, Any]:
    results = tool_results(body)
    if results:
        return say(f"It has {next(iter(results.values()))} characters.")
    return calls(tool_call("call_1", "string_length", {"s": "strawberry"}))


def test_the_jdk_client_at_its_defaults_gets_chat_streams_and_responses(
    stack: StackFactory,
) -> None:
    started = stack(_script)
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "How long?"}]}
    answers = jdk_requests(
        started.base_url,
        ACME_KEY,
        ("POST", "/chat/completions", chat),
        ("POST", "/chat/completions", {**chat, "stream": True}),
        ("POST", "/responses", {"model": MODEL, "input": "How long?"}),
        ("GET", "/models", None),
    )
    assert len(answers) == 8  # each by a new client, then all by one
    for index in (0, 4):
        status, version, body = answers[index]
        assert (status, version) == (200, "HTTP_1_1"), body
        assert json.loads(body)["choices"][0]["message"]["content"] == "It has 10 characters."
    for index in (1, 5):
        status, _, body = answers[index]
        assert status == 200, body
        assert body.rstrip().endswith(b"data: [DONE]")
        assert _streamed_text(body) == "It has 10 characters."
    for index in (2, 6):
        status, _, body = answers[index]
        assert status == 200, body
        assert json.loads(body)["output"][-1]["content"][0]["text"] == "It has 10 characters."
    for index in (3, 7):
        assert answers[index][0] == 200
        assert MODEL in {m["id"] for m in json.loads(answers[index][2])["data"]}
    # Every model request reached the model with the client's messages, and the tool ran.
    users = [r["messages"][0]["content"] for r in started.upstream.requests if "messages" in r]
    users += [r["input"] for r in started.upstream.requests if "input" in r]
    assert users.count("How long?") == 12  # 6 requests, 2 rounds each
    assert len(started.tools.hits) == 6


def test_the_jdk_client_with_a_bad_key_gets_a_401_envelope(stack: StackFactory) -> None:
    started = stack()
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    status, _, body = jdk_requests(
        started.base_url, "sk-wrong", ("POST", "/chat/completions", chat)
    )[0]
    assert status == 401
    assert json.loads(body)["error"]["code"] == "invalid_api_key"
    assert started.upstream.requests == []
