"""A scripted Anthropic Messages server: every request it gets is validated against the
``anthropic`` SDK's own request types (made strict: a key the SDK does not know is an
error, as the API refuses it), and every answer it gives is one the SDK parses
(``tests/gateway/upstream/test_anthropic_fake.py`` points the SDK at it to prove so).

A script step is a list of content blocks (``text``, ``tool_use``, ``thinking``) or a
function of the request body that returns one; streamed when the request asks, as
the API streams: ``message_start``, each block's start, deltas (text in two pieces, a
call's input as ``input_json_delta`` fragments, thinking and its signature) and stop,
a ``ping``, ``message_delta`` with the stop reason and usage, ``message_stop``."""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable
from typing import Any

import jsonschema
from anthropic.types import message_create_params
from pydantic import TypeAdapter

from tests.support.recorder import Answer, Received, Recorder

Block = dict[str, Any]
Step = list[Block] | Callable[[dict[str, Any]], list[Block]]
USAGE = {
    "input_tokens": 11,
    "output_tokens": 7,
    "cache_creation_input_tokens": 5,
    "cache_read_input_tokens": 3,
}
_OPEN_SCHEMAS = frozenset({"InputSchemaTyped"})  # a tool's JSON Schema: any keyword


def text(words: str) -> Block:
    return {"type": "text", "text": words}


def tool_use(name: str, given: dict[str, Any], call_id: str = "toolu_1") -> Block:
    return {"type": "tool_use", "id": call_id, "name": name, "input": given}


def thinking(words: str, signature: str = "sig-1") -> Block:
    return {"type": "thinking", "thinking": words, "signature": signature}


def _strict(node: Any, name: str = "") -> None:
    if isinstance(node, dict):
        if "properties" in node and name not in _OPEN_SCHEMAS:
            node["additionalProperties"] = False
        for key, value in node.items():
            _strict(value, key if key and key[0].isupper() else "")
    elif isinstance(node, list):
        for value in node:
            _strict(value)


@functools.cache
def request_validator(stream: bool) -> jsonschema.Draft202012Validator:
    """The SDK's request type as a JSON Schema, every object closed."""
    kind = (
        message_create_params.MessageCreateParamsStreaming
        if stream
        else message_create_params.MessageCreateParamsNonStreaming
    )
    schema = TypeAdapter(kind).json_schema()
    for name, definition in schema.get("$defs", {}).items():
        _strict(definition, name)
    schema["additionalProperties"] = False
    _strict(schema["properties"])
    return jsonschema.Draft202012Validator(schema)


def request_errors(body: Any) -> list[str]:
    """What in ``body`` the SDK's request type does not allow."""
    stream = isinstance(body, dict) and body.get("stream") is True
    return [
        f"{'/'.join(map(str, error.absolute_path))}: {error.message[:200]}"
        for error in request_validator(stream).iter_errors(body)
    ]


def message(
    blocks: list[Block], model: str = "claude-test", stop_sequence: str | None = None
) -> dict[str, Any]:
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    if stop == "end_turn" and stop_sequence is not None:
        stop = "stop_sequence"
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": stop_sequence if stop == "stop_sequence" else None,
        "usage": USAGE,
    }


def event(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def stream_of(answer: dict[str, Any]) -> list[bytes]:
    """A message as the API streams it."""
    start = {**answer, "content": [], "stop_reason": None, "usage": {**USAGE, "output_tokens": 1}}
    chunks = [event("message_start", {"message": start}), event("ping", {})]
    for index, block in enumerate(answer["content"]):
        kind = block["type"]
        if kind == "text":
            chunks.append(event("content_block_start", {"index": index, "content_block": text("")}))
            words = block["text"]
            for piece in (words[: len(words) // 2], words[len(words) // 2 :]):
                delta = {"type": "text_delta", "text": piece}
                chunks.append(event("content_block_delta", {"index": index, "delta": delta}))
        elif kind == "tool_use":
            opened = {**block, "input": {}}
            chunks.append(event("content_block_start", {"index": index, "content_block": opened}))
            given = json.dumps(block["input"])
            # as the API streams it: a few characters at a time (here at most 64 KiB)
            for piece in [given[:3]] + [given[i : i + 65536] for i in range(3, len(given), 65536)]:
                delta = {"type": "input_json_delta", "partial_json": piece}
                chunks.append(event("content_block_delta", {"index": index, "delta": delta}))
        elif kind == "thinking":
            opened = {"type": "thinking", "thinking": "", "signature": ""}
            chunks.append(event("content_block_start", {"index": index, "content_block": opened}))
            for delta in (
                {"type": "thinking_delta", "thinking": block["thinking"]},
                {"type": "signature_delta", "signature": block["signature"]},
            ):
                chunks.append(event("content_block_delta", {"index": index, "delta": delta}))
        else:
            chunks.append(event("content_block_start", {"index": index, "content_block": block}))
        chunks.append(event("content_block_stop", {"index": index}))
    ended = {"stop_reason": answer["stop_reason"], "stop_sequence": answer["stop_sequence"]}
    chunks.append(event("message_delta", {"delta": ended, "usage": {"output_tokens": 7}}))
    chunks.append(event("message_stop", {}))
    return chunks


def error_body(kind: str, words: str) -> bytes:
    return json.dumps({"type": "error", "error": {"type": kind, "message": words}}).encode()


class Messages:
    """The scripted server: answers each ``POST /v1/messages`` with the next step of
    ``script`` (the last repeats), records what it was sent and what of it the SDK's
    types refused (``refused``: a 400 answered too, as the API would)."""

    def __init__(
        self, *script: Step, key: str | None = None, stop_sequence: str | None = None
    ) -> None:
        self.script = list(script) or [[text("done")]]
        self.key = key
        self.stop_sequence = stop_sequence  # a text answer ends at it
        self.recorder = Recorder(self._respond)
        self.refused: list[str] = []
        self.versions: set[str] = set()  # the ``anthropic-version``s it was sent
        self._count = 0
        self._lock = threading.Lock()

    def _respond(self, hit: Received) -> Answer:
        if hit.method == "GET" and hit.raw_path.endswith("/v1/models"):
            return Answer(body=b'{"data": [], "has_more": false}')
        if hit.method != "POST" or not hit.raw_path.endswith("/v1/messages"):
            return Answer(404, error_body("not_found_error", "no such route"))
        headers = hit.headers
        given = headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")
        if self.key is not None and given != self.key:
            return Answer(401, error_body("authentication_error", "invalid x-api-key"))
        if not headers.get("anthropic-version"):
            self.refused.append("anthropic-version missing")
            return Answer(400, error_body("invalid_request_error", "anthropic-version"))
        self.versions.add(headers["anthropic-version"])
        body = json.loads(hit.body)
        errors = request_errors(body)
        if errors:
            self.refused.extend(errors)
            return Answer(400, error_body("invalid_request_error", "; ".join(errors)))
        with self._lock:
            step = self.script[min(self._count, len(self.script) - 1)]
            self._count += 1
        blocks = step(body) if callable(step) else step
        answer = message(blocks, body["model"], self.stop_sequence)
        if body.get("stream"):
            return Answer(headers=[("content-type", "text/event-stream")], chunks=stream_of(answer))
        return Answer(body=json.dumps(answer).encode())

    @property
    def requests(self) -> list[dict[str, Any]]:
        return [
            json.loads(h.body)
            for h in self.recorder.hits
            if h.method == "POST" and h.raw_path.endswith("/v1/messages")
        ]
