"""A scripted OpenAI-compatible model server.

A test gives it a *script*: a function from the request body to the reply, so the
"model" can read the tool results the gateway fed back and decide what to do next.
Every request it receives is recorded.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


@dataclass
class Die:
    """Stream ``words`` of ``text``, then drop the connection."""

    text: str
    words: int = 2


@dataclass
class Fail:
    """Answer with an error status instead of a completion."""

    status: int
    body: dict[str, Any] = field(
        default_factory=lambda: {"error": {"message": "upstream says no", "type": "x"}}
    )
    headers: dict[str, str] = field(default_factory=dict)


Reply = dict[str, Any] | Fail | Die  # an assistant message, or a failure
Script = Callable[[dict[str, Any]], Reply]

USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def tool_call(call_id: str, name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def calls(*items: dict[str, Any]) -> dict[str, Any]:
    """An assistant message asking for tools."""
    return {"role": "assistant", "content": None, "tool_calls": list(items)}


def say(text: str) -> dict[str, Any]:
    """An assistant message with a final answer."""
    return {"role": "assistant", "content": text}


def tool_results(body: dict[str, Any]) -> dict[str, str]:
    """The tool results in a request's history, by tool_call_id."""
    return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}


def _words(text: str) -> list[str]:
    return re.findall(r"\S+\s*", text) or [text]


def logprobs_of(tokens: list[str]) -> dict[str, Any]:
    """OpenAI's ``logprobs`` of a choice: one entry per token, a fixed logprob each."""
    content = [
        {"token": t, "logprob": -0.25, "bytes": list(t.encode()), "top_logprobs": []}
        for t in tokens
    ]
    return {"content": content, "refusal": None}


def _sse(payload: Any) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


class FakeUpstream:
    """Answers ``stream: true`` requests word by word (``word_delay_s`` apart) and tool
    calls in pieces; ``send_usage=False`` plays a server that reports no usage, and
    ``usage`` is what every round reports otherwise."""

    def __init__(
        self,
        script: Script,
        delay_s: float = 0.0,
        word_delay_s: float = 0.0,
        send_usage: bool = True,
        usage: dict[str, Any] | None = None,
    ) -> None:
        self.script = script
        self.usage = usage if usage is not None else USAGE  # every round reports this
        self.delay_s = delay_s
        self.word_delay_s = word_delay_s
        self.send_usage = send_usage
        self.streams_finished = 0
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def completion(self, body: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        return {
            "id": f"chatcmpl-fake{next(self._ids)}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": body.get("model", "?"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": finish,
                    "logprobs": (
                        logprobs_of(_words(message["content"]))
                        if body.get("logprobs") and message.get("content")
                        else None
                    ),
                }
            ],
            "usage": self.usage_for(body),
        }

    def usage_for(self, body: dict[str, Any]) -> dict[str, Any]:
        """``usage``, its answer no longer than the request's bound (as a server that
        honours ``max_tokens`` reports it)."""
        usage = dict(self.usage)
        bound = body.get("max_completion_tokens") or body.get("max_tokens")
        completion = usage.get("completion_tokens")
        if isinstance(bound, int) and isinstance(completion, int) and completion > bound:
            usage["completion_tokens"] = bound
            if isinstance(usage.get("total_tokens"), int):
                usage["total_tokens"] -= completion - bound
        return usage

    async def chat(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            self.requests.append(body)
            self.headers.append(dict(request.headers))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        reply = self.script(body)
        if isinstance(reply, Fail):
            return JSONResponse(reply.body, status_code=reply.status, headers=reply.headers)
        if body.get("stream"):
            return StreamingResponse(self._stream(body, reply), media_type="text/event-stream")
        if isinstance(reply, Die):
            raise RuntimeError("the fake upstream dies")
        return JSONResponse(self.completion(body, reply))

    async def _stream(self, body: dict[str, Any], reply: dict[str, Any] | Die) -> Any:
        base = {
            "id": f"chatcmpl-fake{next(self._ids)}",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": body.get("model", "?"),
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
            if body.get("logprobs") and delta.get("content"):
                choice["logprobs"] = logprobs_of([delta["content"]])
            return _sse({**base, "choices": [choice]})

        yield chunk({"role": "assistant", "content": ""})
        reasoning = reply.get("reasoning_content") if isinstance(reply, dict) else None
        for word in _words(reasoning) if reasoning else []:  # a reasoning model's, first
            yield chunk({"reasoning_content": word})
        text = reply.text if isinstance(reply, Die) else reply.get("content") or ""
        for index, word in enumerate(_words(text) if text else []):
            if isinstance(reply, Die) and index == reply.words:
                raise RuntimeError("the fake upstream dies mid-stream")
            if index and self.word_delay_s:
                await asyncio.sleep(self.word_delay_s)
            yield chunk({"content": word})
        assert isinstance(reply, dict)
        for index, call in enumerate(reply.get("tool_calls") or []):
            function = call["function"]
            head = {
                "index": index,
                "id": call["id"],
                "type": "function",
                "function": {"name": function["name"], "arguments": ""},
            }
            yield chunk({"tool_calls": [head]})
            arguments = function["arguments"]
            middle = len(arguments) // 2
            for piece in (arguments[:middle], arguments[middle:]):
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        yield chunk({}, "tool_calls" if reply.get("tool_calls") else "stop")
        if self.send_usage and (body.get("stream_options") or {}).get("include_usage"):
            yield _sse({**base, "choices": [], "usage": self.usage_for(body)})
        yield b"data: [DONE]\n\n"
        with self._lock:
            self.streams_finished += 1

    async def embeddings(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            self.requests.append(body)
            self.headers.append(dict(request.headers))
        return JSONResponse(
            {
                "object": "list",
                "data": [{"object": "embedding", "index": 0, "embedding": [0.5, 0.25]}],
                "model": body["model"],
                "usage": {"prompt_tokens": 2, "total_tokens": 2},
            }
        )

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/v1/embeddings", self.embeddings, methods=["POST"]),
            ]
        )
