"""The trip of one request through the code: which of the project's files it enters,
and how often a call climbs back up a layer (a lower layer calling code of a higher one:
a callback). Run in-process, the app between ``httpx.ASGITransport`` and
``MockTransport`` fakes, with ``sys.setprofile`` counting Python calls.

    python -m bench.trip            # a chat tool round, a streamed one, a Responses one

Files: every module of ``gateway/`` and ``tool_registry/`` whose code ran while the
request was served (startup is left out). A climb is a call whose caller's layer is
below its callee's (the layers as ``tests/test_layers.py`` orders them); each distinct
caller → callee pair is counted once.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

# The in-process tier's gateway: the app between httpx.ASGITransport and MockTransports.
from tests.gateway.test_app import completion, gateway
from tests.test_layers import LAYERS as TEST_LAYERS
from tests.test_layers import in_base

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gateway", "tool_registry")
# The layers, top to bottom, as tests/test_layers.py holds them (the one list);
# tool_registry stands under all.
LAYERS = tuple(name for name in TEST_LAYERS if name != "base")


def _in_base(path: str) -> bool:
    module = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    return in_base(module)


def layer(path: str) -> int:
    """How high a file stands: 0 is the top (cli); tool_registry is the bottom."""
    if path.startswith("tool_registry/"):
        return len(LAYERS) + 2
    if _in_base(path):
        return len(LAYERS) + 1
    parts = path.split("/")
    if len(parts) > 2 and parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    return LAYERS.index("app")


def relative(filename: str) -> str | None:
    try:
        path = Path(filename).resolve().relative_to(ROOT)
    except ValueError:
        return None
    text = path.as_posix()
    return text if text.startswith(PACKAGES) else None


class Trip:
    def __init__(self) -> None:
        self.files: set[str] = set()
        self.climbs: set[tuple[str, str]] = set()
        self._names: dict[str, str | None] = {}

    def _where(self, frame: FrameType) -> str | None:
        filename = frame.f_code.co_filename
        if filename not in self._names:
            self._names[filename] = relative(filename)
        return self._names[filename]

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        here = self._where(frame)
        if here is None:
            return
        self.files.add(here)
        caller = frame.f_back
        there = self._where(caller) if caller is not None else None
        if there is not None and layer(there) > layer(here):
            self.climbs.add(
                (f"{there}:{caller.f_code.co_name}", f"{here}:{frame.f_code.co_name}")  # type: ignore[union-attr]
            )


@contextmanager
def traced(trip: Trip) -> Iterator[None]:
    sys.setprofile(trip)
    try:
        yield
    finally:
        sys.setprofile(None)


def chunks(message: dict[str, Any]) -> bytes:
    head: dict[str, Any] = {"id": "c", "object": "chat.completion.chunk", "created": 1}
    head["model"] = "m"
    delta = {**head, "choices": [{"index": 0, "delta": message, "finish_reason": "stop"}]}
    usage = {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3}
    tail = {**head, "choices": [], "usage": usage}
    events = [f"data: {json.dumps(line)}\n\n" for line in (delta, tail)]
    return ("".join(events) + "data: [DONE]\n\n").encode()


def model(request: httpx.Request) -> httpx.Response:
    """Calls the first tool once, then quotes its result; streams when asked to."""
    body = json.loads(request.content)
    results = [m for m in body["messages"] if m["role"] == "tool"]
    if results:
        message: dict[str, Any] = {"role": "assistant", "content": f"got {results[0]['content']}"}
    else:
        name = body["tools"][0]["function"]["name"]
        call = {"id": "t1", "type": "function", "function": {"name": name, "arguments": "{}"}}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
    if body.get("stream"):
        if "tool_calls" in message:
            message["tool_calls"][0]["index"] = 0
        headers = {"content-type": "text/event-stream"}
        return httpx.Response(200, stream=Stream(chunks(message)), headers=headers)
    return httpx.Response(200, json=completion(message))


class Stream(httpx.AsyncByteStream):
    """A body read as it comes, as a real upstream's stream is."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self._data


def tools(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"value": 42})


REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat tool round": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "go"}]}),
    "chat tool round, streamed": (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "go"}], "stream": True},
    ),
    "responses tool round": ("/v1/responses", {"input": "go"}),
}


async def measure(send: Callable[[httpx.AsyncClient], Any]) -> Trip:
    async with gateway(model, tools) as client:
        await send(client)  # warm: the first request fills caches
        trip = Trip()
        with traced(trip):
            await send(client)
            await asyncio.sleep(0.05)  # what runs after the answer (metering, logs)
    return trip


def sender(path: str, body: dict[str, Any]) -> Callable[[httpx.AsyncClient], Any]:
    async def send(client: httpx.AsyncClient) -> None:
        response = await client.post(path, json={"model": "m", **body})
        response.raise_for_status()
        assert b"got" in response.content, response.content

    return send


async def main() -> None:
    for name, (path, body) in REQUESTS.items():
        trip = await measure(sender(path, body))
        print(f"{name}: {len(trip.files)} files, {len(trip.climbs)} climbs back up")
        if "-v" in sys.argv:
            for file in sorted(trip.files):
                print(f"    {file}")
            for caller, callee in sorted(trip.climbs):
                print(f"    climb {caller} -> {callee}")


if __name__ == "__main__":
    asyncio.run(main())
