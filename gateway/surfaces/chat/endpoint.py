"""The chat-completions surface (docs/design.md §7, §10): its part of the request skeleton.
A request's loop starts from the client's messages — with the hidden turns of a
hand-back put back (``TurnStore``) — runs once per choice, and is rendered as a
completion or a stream of chunks; old clients' ``functions`` become tools and back."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from gateway.engine.report import RunReport
from gateway.errors import BadRequest
from gateway.ops.offload import offload
from gateway.policy.limits import effective_tools
from gateway.policy.tenants import Tenant
from gateway.surfaces.approval_answers import asked_in
from gateway.surfaces.chat.chunks import ChunkWriter
from gateway.surfaces.chat.legacy import from_functions, to_function_call, uses_functions
from gateway.surfaces.chat.render import render_completion
from gateway.surfaces.chat.request import ChatRequest, parse_chat_request
from gateway.surfaces.head import Head
from gateway.surfaces.request_end import Ended
from gateway.surfaces.skeleton import Start, completion_id
from gateway.surfaces.streaming import SSE
from gateway.upstream.sse import DONE
from gateway.values import Message, UsageCounts
from tool_registry import dumps


class ChatCompletions:
    """``POST /v1/chat/completions``."""

    forward_path = "/chat/completions"
    echoes_call_ids = True

    def parse(self, raw: bytes, headers: Mapping[str, str]) -> ChatRequest:
        return parse_chat_request(raw, headers)

    def adapt(self, asked: ChatRequest, tenant: Tenant) -> ChatRequest:
        """With server tools in play, old clients' functions become tools (and back);
        without, the request passes through as it came."""
        if not (tenant.tools and uses_functions(asked.body)):
            return asked
        translated = from_functions(asked)
        narrowing, names = translated.narrowing, translated.client_tool_names
        return translated if effective_tools(tenant.tools, narrowing, names)[0] else asked

    def call(self, asked: ChatRequest, head: Head) -> ChatCall:
        return ChatCall(asked, head)


class ChatCall:
    """One chat completion request, after its head."""

    ended: Ended | None = None  # a chat completion keeps nothing once answered

    def __init__(self, asked: ChatRequest, head: Head) -> None:
        self._asked = asked
        self._head = head
        self._id = completion_id(head.exchange)
        self._created = int(time.time())

    async def decode(self) -> Start:
        asked, head = self._asked, self._head
        sent = asked.messages
        # Answered before the loop: they are the gateway's, not the model's.
        approvals = await offload(head.large, asked_in, sent)
        passes = head.passes("openai")
        n = 1 if passes else choices_of(asked.body, head.policy.limits.max_iterations)
        return Start(
            asked.parameters,
            sent,
            asked.client_tools,
            approvals,
            forward=asked.body if passes else None,
            changed=asked.changed,
            single_call_id=asked.single_call_id,
            n=n,
        )

    async def fit(self, history: list[Message], usage: list[UsageCounts | None]) -> list[Message]:
        return history  # the client's to fit

    async def render(self, report: RunReport) -> bytes:
        asked = self._asked
        completion = render_completion(
            report.outcomes, asked.model, report.usage, self._id, self._created
        )
        if asked.single_call_id is not None:
            completion = to_function_call(completion)
        return dumps(completion)

    def stream(self, n: int) -> ChunkStream:
        legacy = self._asked.single_call_id is not None
        model, created = self._asked.model, self._created
        writers = [
            ChunkWriter(self._id, model, legacy=legacy, index=index, created=created)
            for index in range(n)
        ]
        options = self._asked.body.get("stream_options")
        usage = isinstance(options, dict) and options.get("include_usage") is True
        return ChunkStream(writers, usage)


class ChunkStream:
    """A chat completion's chunks: a writer per choice, then the summed usage (when
    the client asked for it) and ``[DONE]``."""

    framing = SSE

    def __init__(self, choices: list[ChunkWriter], include_usage: bool) -> None:
        self.choices = choices
        self._include_usage = include_usage

    async def close(self, report: RunReport) -> list[bytes]:
        if self._include_usage and report.usage:
            return [self.choices[0].usage(report.usage), DONE]
        return [DONE]


def choices_of(body: Mapping[str, Any], max_iterations: int) -> int:
    """How many choices a request with server tools asks for: each is a loop of its
    own, and every loop makes at least one upstream call of the request's
    ``max_iterations``."""
    n = body.get("n", 1)
    if n is None:
        return 1
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= max_iterations:
        raise BadRequest(
            f"'n' must be an integer from 1 to {max_iterations} (max_iterations) "
            "when the gateway runs the request's rounds (server tools in play, or a "
            "model server of another dialect).",
            param="n",
        )
    return n
