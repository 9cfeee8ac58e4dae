"""The benchmark's fake upstream model server and fake HTTP tool server.

    python -m bench.fakes upstream --port 9001 [--latency-ms 0] [--ttft-ms 20]
                                   [--tokens 20] [--token-interval-ms 5]
    python -m bench.fakes tools --port 9002
    python -m bench.fakes collector --port 9003

The upstream answers by model name, in chat completions (or Anthropic Messages, at
``/v1/messages``, or Bedrock Converse, at ``/model/{id}/converse``): ``bench-tool1``
asks for one ``bench_fast`` call,
``bench-tools4`` for four ``bench_slow`` calls, ``bench-guard`` judges every text safe (a
guardrail's judge), anything else answers at once; once the
history holds tool results it answers. ``stream: true`` is answered as SSE: the first
token after ``ttft-ms``, then one token every ``token-interval-ms``. The tool server
answers ``/tool?ms=N`` after N milliseconds. The collector takes OTLP/HTTP exports
and answers each with an empty success, as a collector that keeps up does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .rawhttp import Request, Responder, run

USAGE = {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30}


def _completion(message: dict[str, Any], finish: str) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": "bench",
            "choices": [
                {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            ],
            "usage": USAGE,
        },
        separators=(",", ":"),
    ).encode()


def _calls(name: str, count: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps({"i": i})},
        }
        for i in range(count)
    ]


ANSWER = _completion({"role": "assistant", "content": "The answer is 42."}, "stop")
VERDICT = _completion({"role": "assistant", "content": '{"verdict": "safe"}'}, "stop")
TOOL1 = _completion(
    {"role": "assistant", "content": None, "tool_calls": _calls("bench_fast", 1)}, "tool_calls"
)
TOOLS4 = _completion(
    {"role": "assistant", "content": None, "tool_calls": _calls("bench_slow", 4)}, "tool_calls"
)


def _message(content: list[dict[str, Any]], stop: str) -> bytes:
    usage = {"input_tokens": 20, "output_tokens": 10}
    message = {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": "bench",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
    }
    return json.dumps(message, separators=(",", ":")).encode()


MESSAGES_ANSWER = _message([{"type": "text", "text": "The answer is 42."}], "end_turn")
MESSAGES_TOOL1 = _message(
    [{"type": "tool_use", "id": "toolu_0", "name": "bench_fast", "input": {"i": 0}}], "tool_use"
)


def _converse(content: list[dict[str, Any]], stop: str) -> bytes:
    usage = {"inputTokens": 20, "outputTokens": 10, "totalTokens": 30}
    answer = {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop,
        "usage": usage,
        "metrics": {"latencyMs": 1},
    }
    return json.dumps(answer, separators=(",", ":")).encode()


CONVERSE_ANSWER = _converse([{"text": "The answer is 42."}], "end_turn")
CONVERSE_TOOL1 = _converse(
    [{"toolUse": {"toolUseId": "tooluse_0", "name": "bench_fast", "input": {"i": 0}}}], "tool_use"
)


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    payload = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": "bench",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


class Upstream:
    def __init__(self, latency_s: float, ttft_s: float, tokens: int, interval_s: float) -> None:
        self.latency_s = latency_s
        self.ttft_s = ttft_s
        self.tokens = tokens
        self.interval_s = interval_s

    async def __call__(self, request: Request, response: Responder) -> None:
        body = request.body
        if b'"stream":true' in body or b'"stream": true' in body:
            await self.stream(response)
            return
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        if request.target.startswith(b"/model/"):
            asks = b"/bench-tool1/" in request.target and b'"toolResult"' not in body
            response.send(200, CONVERSE_TOOL1 if asks else CONVERSE_ANSWER)
            return
        if request.target.endswith(b"/v1/messages"):
            asks = b'"bench-tool1"' in body and b'"tool_result"' not in body
            response.send(200, MESSAGES_TOOL1 if asks else MESSAGES_ANSWER)
            return
        answered = b'"role":"tool"' in body
        if b'"bench-guard"' in body:  # a guardrail's judge: it judges at once
            response.send(200, VERDICT)
        elif not answered and b'"bench-tool1"' in body:
            response.send(200, TOOL1)
        elif not answered and b'"bench-tools4"' in body:
            response.send(200, TOOLS4)
        else:
            response.send(200, ANSWER)

    async def stream(self, response: Responder) -> None:
        response.start_stream()
        await response.chunk(_chunk({"role": "assistant", "content": ""}))
        await asyncio.sleep(self.ttft_s)
        for index in range(self.tokens):
            if index:
                await asyncio.sleep(self.interval_s)
            await response.chunk(_chunk({"content": f"t{index} "}))
        await response.chunk(_chunk({}, "stop"))
        usage = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "bench",
            "choices": [],
            "usage": USAGE,
        }
        await response.chunk(b"data: " + json.dumps(usage).encode() + b"\n\n")
        await response.chunk(b"data: [DONE]\n\n")
        await response.end_stream()


async def tools(request: Request, response: Responder) -> None:
    query = parse_qs(urlsplit(request.target.decode()).query)
    delay_ms = float(query.get("ms", ["0"])[0])
    if delay_ms:
        await asyncio.sleep(delay_ms / 1000)
    response.send(200, b'{"ok":true,"value":42}')


async def collector(request: Request, response: Responder) -> None:
    response.send(200, b"", b"application/x-protobuf")  # an empty ExportTraceServiceResponse


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fakes")
    parser.add_argument("kind", choices=["upstream", "tools", "collector"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency-ms", type=float, default=0)
    parser.add_argument("--ttft-ms", type=float, default=20)
    parser.add_argument("--tokens", type=int, default=20)
    parser.add_argument("--token-interval-ms", type=float, default=5)
    args = parser.parse_args()
    if args.kind == "tools":
        run(tools, args.host, args.port)
    elif args.kind == "collector":
        run(collector, args.host, args.port)
    else:
        upstream = Upstream(
            args.latency_ms / 1000, args.ttft_ms / 1000, args.tokens, args.token_interval_ms / 1000
        )
        run(upstream, args.host, args.port)


if __name__ == "__main__":
    main()
