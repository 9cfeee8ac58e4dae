"""The chat-completions surface of the loop (DESIGN.md §7, §10): a request becomes loop
jobs (one per choice), hidden turns are kept and put back around client hand-backs
(``TurnStore``), and the drivers' outcomes are rendered as a completion or a stream."""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING, Any

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response

from gateway.engine.loop import LoopJob, Run
from gateway.engine.stream import stream_loop
from gateway.errors import BadRequest
from gateway.policy.limits import effective_tools
from gateway.policy.point import PolicyPoint
from gateway.policy.tenants import Tenant
from gateway.surfaces.chat.chunks import ChunkWriter
from gateway.surfaces.chat.legacy import call_id, from_functions, to_function_call, uses_functions
from gateway.surfaces.chat.render import render_completion
from gateway.surfaces.chat.request import ChatRequest, parse_chat_request
from gateway.surfaces.event_stream import start_event_stream
from gateway.surfaces.forward import Meter, forward_json
from gateway.surfaces.http import Exchange, json_response, read_body
from gateway.surfaces.skeleton import (
    SHADOWED_HEADER,
    Admit,
    completion_id,
    first_byte,
    loop_headers,
)
from gateway.upstream.chat_model import ChatModel
from gateway.upstream.sse import DONE
from tool_registry import CallContext

if TYPE_CHECKING:
    from gateway.runtime.services import Gateway


class ChatCompletions:
    """``POST /v1/chat/completions``."""

    def __init__(self, gateway: Gateway, admit: Admit) -> None:
        self._gateway = gateway
        self._admit = admit

    async def __call__(self, request: Request, exchange: Exchange) -> Response:
        gateway = self._gateway
        runtime, tenant, meter = await self._admit(request, exchange)
        server = runtime.config.server
        raw = await read_body(request, exchange, server.max_body_bytes, server.body_timeout_s)
        chat = parse_chat_request(raw, request.headers)
        route = runtime.models.resolve(chat.model, tenant)
        exchange.model = chat.model
        single_call_id = None
        if tenant.tools and uses_functions(chat.body):
            # With server tools in play, old clients' functions become tools (and back);
            # without, the request passes through as it came.
            translated = from_functions(chat)
            if effective_tools(tenant.tools, translated.narrowing, translated.client_tool_names)[0]:
                single_call_id = call_id(len(chat.body["messages"]))
                chat = translated
        policy, shadowed = PolicyPoint.of_request(
            tenant.tools, tenant.limits, chat.narrowing, chat.client_tool_names, runtime.registry
        )
        if shadowed:  # the client's own tools of these names win for this request
            exchange.headers[SHADOWED_HEADER] = ",".join(shadowed)
        # A turn handed back in this request is bound to what the client sent.
        keep = None
        if policy.server_tools and chat.client_tool_names:
            keep = gateway.turns.keeper(tenant.id, chat.body["messages"], exchange.identity)
        changed = await self._restore(tenant, chat, exchange.identity) or chat.changed
        if not policy.server_tools:
            return await forward_json(
                gateway.upstream,
                route,
                "/chat/completions",
                raw,
                chat.body,
                changed,
                chat.model,
                stream=chat.stream,
                meter=meter,
                on_usage=partial(setattr, exchange, "usage"),
            )
        n = choices_of(chat.body, policy.limits.max_iterations)
        tools = [*runtime.registry.definitions(policy.server_tools), *chat.client_tools]
        model = ChatModel(
            gateway.upstream,
            route.upstream,
            chat.body,
            route.model.target,
            tools,
            chat.client_tool_names,
        )
        context = CallContext(tenant.id, request.headers)
        job = LoopJob(model, policy, context, keep, single_call_id)
        runs = gateway.loop.runs(job, n)
        exchange.session = runs[0]  # their state is the request's
        if chat.stream:
            return await self._stream(chat, runs, exchange, meter)
        outcomes = await gateway.loop.run_all(runs)
        state = policy.state
        completion = render_completion(
            outcomes, chat.model, state.usage.totals, completion_id(exchange), int(time.time())
        )
        if single_call_id is not None:
            completion = to_function_call(completion)
        exchange.headers |= loop_headers(runs[0])
        response = json_response(completion)
        if meter is not None:
            response.background = BackgroundTask(meter, state.usage.totals)
        return response

    async def _restore(self, tenant: Tenant, chat: ChatRequest, identity: str) -> bool:
        """A client returning with tool results may be answering a mixed turn: put the
        server side of it back (from whichever replica saved it, for the same caller)."""
        messages = chat.body["messages"]
        if not any(m.get("role") == "tool" for m in messages):
            return False
        restored = await self._gateway.turns.restore(tenant.id, messages, identity)
        if restored is None:
            return False
        chat.body["messages"] = restored
        return True

    async def _stream(
        self,
        chat: ChatRequest,
        runs: list[Run],
        exchange: Exchange,
        meter: Meter | None,
    ) -> Response:
        options = chat.body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        legacy = runs[0].job.single_call_id is not None
        created = int(time.time())
        writers = [
            ChunkWriter(
                completion_id(exchange), chat.model, legacy=legacy, index=index, created=created
            )
            for index in range(len(runs))
        ]
        state = runs[0].state

        def closing() -> list[bytes]:
            if include_usage and state.usage:
                return [writers[0].usage(state.usage.totals), DONE]
            return [DONE]

        async def finished() -> None:
            if meter is not None:
                await meter(state.usage.totals)

        events = stream_loop(self._gateway.loop, runs, writers, closing, finished)
        return await start_event_stream(events, partial(first_byte, exchange))


def choices_of(body: dict[str, Any], max_iterations: int) -> int:
    """How many choices a request with server tools asks for: each is a loop of its
    own, and every loop makes at least one upstream call of the request's
    ``max_iterations``."""
    n = body.get("n", 1)
    if n is None:
        return 1
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= max_iterations:
        raise BadRequest(
            f"'n' must be an integer from 1 to {max_iterations} (max_iterations) "
            "when server tools are in play.",
            param="n",
        )
    return n
