"""The gateway's own work per request, alone: the app driven as raw ASGI messages (no
client, no server), its upstream a canned wire that answers at once, its tools an aiohttp
session that answers at once (the gateway's own tool transport over it, as in
production: only the socket is left out). What is left is what the gateway itself
does — admission, the body, parsing, policy, the loop, metrics, redaction, the answer,
the trace and run row kept after it — in microseconds, without the HTTP machinery on
either side that ``make bench`` measures too.

    python -m bench.own pass|round [--dialect openai|anthropic|bedrock] [--requests N]
                                   [--history TURNS] [--profile FILE]

``pass`` is a pass-through (no tools in play), ``round`` a chat tool round (ask, one
tool call, ask again), with its model on an upstream of ``--dialect`` (a round's
translation to Anthropic Messages or Bedrock Converse, SigV4 signing included, against
chat completions'). ``--history`` puts that many earlier turns (a user's question and
the assistant's answer, about 700 bytes a turn) before the request's own question, as
an agent's session resends its whole history each time. It prints five timings of N
requests each (the least is the one to compare: the others carry the machine's noise);
``--profile`` writes cProfile statistics of one more batch to FILE. Garbage collection
is tuned as ``toolgate serve`` tunes it. Compare two checkouts by running each's copy,
interleaved.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import time
import warnings
from collections.abc import AsyncIterator, Mapping, MutableMapping
from typing import Any

import aiohttp
import httpx
import orjson
import yaml
from multidict import CIMultiDict, CIMultiDictProxy

from gateway import GatewayConfig, create_app
from gateway.ops.gc_tuning import tune_gc
from gateway.upstream.wire import Answer, Timeouts
from tool_registry.transport import GatewayTransport

from .fakes import CONVERSE_ANSWER, CONVERSE_TOOL1, MESSAGES_ANSWER, MESSAGES_TOOL1
from .run import AWS, PLAIN_KEY, TOOLS_KEY, gateway_config

CHAT = "/v1/chat/completions"
_USAGE = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}


def _completion(model: str, message: dict[str, Any], reason: str) -> bytes:
    choice = {"index": 0, "message": message, "finish_reason": reason}
    return orjson.dumps(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": model,
            "choices": [choice],
            "usage": _USAGE,
        }
    )


ANSWER = _completion("bench-plain", {"role": "assistant", "content": "42"}, "stop")
_CALL = {"id": "call_1", "type": "function", "function": {"name": "bench_fast", "arguments": "{}"}}
CALLS = _completion(
    "bench-tool1", {"role": "assistant", "content": None, "tool_calls": [_CALL]}, "tool_calls"
)


class _Canned:
    __slots__ = ("_body", "headers", "status_code")

    def __init__(self, body: bytes) -> None:
        self.status_code = 200
        self.headers: Mapping[str, str] = {"content-type": "application/json"}
        self._body = body

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        yield self._body

    async def aread(self) -> bytes:
        return self._body

    async def aclose(self) -> None:
        return None


class CannedWire:
    """An upstream that asks for the bench tool when tools are offered and none has
    answered yet, and answers otherwise."""

    async def send(
        self, method: str, url: str, headers: Mapping[str, str], content: bytes, phases: Timeouts
    ) -> Answer:
        if "/model/" in url:  # Bedrock Converse
            asks = b'"toolResult"' not in content
            return _Canned(CONVERSE_TOOL1 if asks else CONVERSE_ANSWER)
        if url.endswith("/v1/messages"):  # Anthropic Messages
            asks = b'"tool_result"' not in content
            return _Canned(MESSAGES_TOOL1 if asks else MESSAGES_ANSWER)
        if b'"tools"' in content and b'"role":"tool"' not in content:
            return _Canned(CALLS)
        return _Canned(ANSWER)

    async def aclose(self) -> None:
        return None


def _tool(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"ok": True})


_TOOL_ANSWER = b'{"ok":true}'


class _CannedContent:
    __slots__ = ()

    async def iter_chunked(self, n: int) -> AsyncIterator[bytes]:
        yield _TOOL_ANSWER


class _CannedToolResponse:
    """What aiohttp answers a tool call with, as the tool transport reads it."""

    __slots__ = ()
    status = 200
    reason = "OK"
    headers = CIMultiDictProxy(
        CIMultiDict({"content-type": "application/json", "content-length": "11"})
    )
    content = _CannedContent()

    async def __aexit__(self, *exc: object) -> None:
        return None


with warnings.catch_warnings():  # aiohttp discourages a session's subclass: a fake's
    warnings.simplefilter("ignore", DeprecationWarning)

    class CannedToolSession(aiohttp.ClientSession):
        """A session whose every request is answered at once (no socket, no connector)."""

        def __init__(self) -> None:  # nothing of a real session: it never connects
            pass

        async def request(self, method: str, url: object, **kw: object) -> Any:  # type: ignore[override]
            return _CannedToolResponse()

        async def close(self) -> None:
            return None


class Driver:
    """Sends one request at a time to the app as uvicorn would, and checks the answer."""

    def __init__(self, which: str, dialect: str = "openai", history: int = 0) -> None:
        os.environ.update(AWS)  # the bedrock upstream's requests are signed
        config = GatewayConfig.model_validate(yaml.safe_load(gateway_config(1, 2, 3, 4)))
        self.app = create_app(
            config,
            upstream_transport=httpx.MockTransport(_tool),  # replaced by the canned wire
            tool_transport=GatewayTransport(client=CannedToolSession()),
        )
        model, key = ("bench-tool1", TOOLS_KEY) if which == "round" else ("bench-plain", PLAIN_KEY)
        if dialect != "openai":
            model = f"{model}-{dialect}"
        earlier = [
            message
            for turn in range(history)
            for message in (
                {"role": "user", "content": f"What does src/module_{turn}.py do? " * 8},
                {"role": "assistant", "content": f"It doubles x (module {turn}). " * 12},
            )
        ]
        messages = [*earlier, {"role": "user", "content": "Hi"}]
        self.body = orjson.dumps({"model": model, "messages": messages})
        self.headers = [
            (b"host", b"127.0.0.1:8080"),
            (b"authorization", f"Bearer {key}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(self.body)).encode()),
        ]

    async def use_canned_wire(self) -> None:
        """The canned upstream in place of the model servers; and the writes an answer
        does not wait for (its trace and run row) done with each request, so that what
        they cost is counted with the request that made them (a server does them after
        its answer, on a worker: this drives no event loop turns for one)."""
        gateway = self.app.state.gateway
        for dialect in gateway.model_servers._dialects.values():
            dialect.exchange._wire = CannedWire()
        afterwards = getattr(gateway, "afterwards", None)
        if afterwards is not None:
            await afterwards.aclose()  # no worker: each write is done when submitted

    async def one(self) -> None:
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": CHAT,
            "raw_path": CHAT.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": self.headers,
            "client": ("127.0.0.1", 5555),
            "server": ("127.0.0.1", 8080),
            "state": {},
        }
        sent: list[MutableMapping[str, Any]] = []
        given = False
        over = asyncio.Event()

        async def receive() -> dict[str, Any]:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": self.body, "more_body": False}
            await over.wait()
            return {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(message)

        await self.app(scope, receive, send)
        over.set()
        if sent[0]["status"] != 200:
            raise SystemExit(f"answered {sent[0]['status']}: {sent[1].get('body', b'')[:300]!r}")


async def main(
    which: str, dialect: str, requests: int, profile: str | None, history: int = 0
) -> None:
    driver = Driver(which, dialect, history)
    async with driver.app.router.lifespan_context(driver.app):
        await driver.use_canned_wire()
        for _ in range(300):  # warm: caches filled, first-time imports done
            await driver.one()
        tune_gc()
        timings = []
        for _ in range(5):
            started = time.perf_counter()
            for _ in range(requests):
                await driver.one()
            timings.append((time.perf_counter() - started) / requests * 1e6)
        print(
            f"{which} ({dialect}{f', {history} turns before' if history else ''}, "
            f"{len(driver.body):,} bytes): "
            + " ".join(f"{t:.1f}" for t in timings)
            + f" µs; least {min(timings):.1f}"
        )
        if profile:
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(requests):
                await driver.one()
            profiler.disable()
            profiler.dump_stats(profile)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("which", choices=["pass", "round"])
    parser.add_argument("--dialect", choices=["openai", "anthropic", "bedrock"], default="openai")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--history", type=int, default=0, help="earlier turns in each request")
    parser.add_argument("--profile", help="write cProfile statistics of one more batch here")
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main(args.which, args.dialect, args.requests, args.profile, args.history))
