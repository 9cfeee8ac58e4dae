"""A scripted OpenAI-compatible model server.

A test gives it a *script*: a function from the request body to the reply, so the
"model" can read the tool results the gateway fed back and decide what to do next.
Every request it receives is recorded.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


@dataclass
class Fail:
    """Answer with an error status instead of a completion."""

    status: int
    body: dict[str, Any] = field(
        default_factory=lambda: {"error": {"message": "upstream says no", "type": "x"}}
    )
    headers: dict[str, str] = field(default_factory=dict)


Reply = dict[str, Any] | Fail  # an assistant message, or a failure
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


class FakeUpstream:
    def __init__(self, script: Script, delay_s: float = 0.0) -> None:
        self.script = script
        self.delay_s = delay_s
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
                {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            ],
            "usage": dict(USAGE),
        }

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
        return JSONResponse(self.completion(body, reply))

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
