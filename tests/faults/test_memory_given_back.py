"""A failed request gives its memory back (issue 47 §5).

A request that fails — an upstream that cannot be reached, one that answers 500 after a
tool round, one that does not answer in time, one that dies in the middle of a stream,
a client that leaves mid-stream — used to keep its whole decoded history: reference
cycles through the stored error's traceback, its frames and their locals, which the
serving process's collector settings (``ops/gc_tuning.py``: the start-up heap frozen,
thresholds 10,000/50/100) left uncollected for as long as the process idled. Eight
such 30 MiB Responses requests reached 5.85 GB.

``toolgate serve`` (its production collector settings) is driven through every kind,
each with a large body, three times over; what the process holds must not grow from
the first pass to the last (the first pass grows the allocator's arenas, which are
reused after)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.recorder import Answer, Received, Recorder
from tests.support.scripted import TENANT_KEY, Harness, Model, asks, call, config, tool
from tests.support.servers import ServeProcess, free_port

ITEMS = 60_000  # tiny history items: about 2.3 MiB of JSON, a few hundred MiB decoded
PASSES = 3
MAX_GROWTH_MIB = 40  # from the first pass to the last; a leak grew ~15 MiB a request


def _rss_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        fields = dict(line.split(":", 1) for line in status)
    return int(fields["VmRSS"].split()[0]) // 1024


def _model(hit: Received) -> Answer:
    """A tool round first, then the failure the model's name asks for."""
    body = json.loads(hit.body)
    if not any(m.get("role") == "tool" for m in body["messages"]):
        return Model(asks(call("t", {})))._respond(hit)
    if body["model"] == "fails":
        return Answer(500, b'{"error": {"message": "the model server broke"}}')
    if body["model"] == "dies":  # a stream that starts, then ends without its end
        chunk = {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "dies",
            "choices": [{"index": 0, "delta": {"content": "partial "}, "finish_reason": None}],
        }
        return Answer(
            headers=[("content-type", "text/event-stream")],
            chunks=[b"data: " + json.dumps(chunk).encode() + b"\n\n", b"data: {broken"],
        )
    return Answer(500, b"{}")


class Hangs:
    """A model server that takes the request and never answers (a timeout)."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        try:
            while True:
                self._held.append(self._listener.accept()[0])
        except OSError:
            return

    def close(self) -> None:
        self._listener.close()
        for held in self._held:
            held.close()


@pytest.fixture
def served(harness: Harness, tmp_path: Path) -> Iterator[ServeProcess]:
    model = harness.serve(Recorder(_model)).url
    tools = harness.serve(Recorder(lambda hit: Answer(body=b'{"n": 1}'))).url
    hangs = Hangs()
    data = config(model, [tool("t", f"{tools}/t")])
    data["upstreams"] = [
        {"name": "up", "base_url": f"{model}/v1", "max_retries": 0},
        {"name": "gone", "base_url": f"http://127.0.0.1:{free_port()}/v1", "max_retries": 0},
        {"name": "slow", "base_url": f"{hangs.url}/v1", "max_retries": 0, "timeout_s": 0.5},
    ]
    data["models"] = [
        {"name": "fails", "upstream": "up"},
        {"name": "dies", "upstream": "up"},
        {"name": "refused", "upstream": "gone"},
        {"name": "hangs", "upstream": "slow"},
    ]
    data["server"] = {"stream_keepalive_s": 0.05}
    path = tmp_path / "gateway.yaml"
    path.write_text(json.dumps(data))
    process = ServeProcess(path, tmp_path / "log")
    yield process
    process.stop()
    hangs.close()


def _history(surface: str) -> dict[str, Any]:
    items = [{"role": "user", "content": f"line {i}"} for i in range(ITEMS)]
    return {"input": items} if surface == "responses" else {"messages": items}


# (surface, model, streamed, the client leaves after its first event)
KINDS = [
    (surface, model, stream, False)
    for surface in ("chat", "responses")
    for model in ("refused", "fails", "hangs")
    for stream in (False, True)
] + [
    ("chat", "dies", True, False),
    ("responses", "dies", True, False),
    ("chat", "fails", True, True),
    ("responses", "fails", True, True),
]


def _fail(client: httpx.Client, surface: str, model: str, stream: bool, leave: bool) -> None:
    path = "/v1/responses" if surface == "responses" else "/v1/chat/completions"
    body = {"model": model, "stream": stream, **_history(surface)}
    with client.stream("POST", path, json=body) as answer:
        if leave:
            next(answer.iter_raw())  # the first event, then the connection is closed
            return
        text = answer.read().decode()
    failed = answer.status_code >= 500 or '"error"' in text
    assert failed, (surface, model, answer.status_code, text[:300])


def test_every_kind_of_failure_gives_its_memory_back(served: ServeProcess) -> None:
    pid = served.process.pid
    headers = {"authorization": f"Bearer {TENANT_KEY}"}
    held: list[int] = []
    with httpx.Client(base_url=served.url, headers=headers, timeout=60) as client:
        for _ in range(PASSES):
            for kind in KINDS:
                _fail(client, *kind)
            # The health route answers once every request above is over.
            assert client.get("/healthz").status_code == 200
            held.append(_rss_mib(pid))
    assert held[-1] - held[0] < MAX_GROWTH_MIB, f"RSS after each pass (MiB): {held}"
