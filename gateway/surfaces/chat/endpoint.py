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

from gateway.engine.loop import LoopJob, LoopSession, Outcome
from gateway.engine.rounds import HandBack
from gateway.engine.stream import stream_loop
from gateway.errors import BadRequest
from gateway.policy.limits import effective_limits, effective_tools
from gateway.policy.tenants import Tenant
from gateway.surfaces.chat.chunks import ChunkWriter
from gateway.surfaces.chat.legacy import call_id, from_functions, to_function_call, uses_functions
from gateway.surfaces.chat.request import ChatRequest, parse_chat_request
from gateway.surfaces.event_stream import start_event_stream
from gateway.surfaces.forward import Meter, forward_json
from gateway.surfaces.http import Exchange, json_response, read_body
from gateway.surfaces.skeleton import SHADOWED_HEADER, Admit, first_byte
from gateway.upstream import dialect
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
        server_tools, shadowed = effective_tools(
            tenant.tools, chat.narrowing, chat.client_tool_names
        )
        if shadowed:  # the client's own tools of these names win for this request
            exchange.headers[SHADOWED_HEADER] = ",".join(shadowed)
        # A turn handed back in this request is bound to what the client sent.
        keep = None
        if server_tools and chat.client_tool_names:
            keep = gateway.turns.keeper(tenant.id, chat.body["messages"], exchange.identity)
        changed = await self._restore(tenant, chat, exchange.identity) or chat.changed
        if not server_tools:
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
        limits = effective_limits(tenant.limits, chat.narrowing)
        n = choices_of(chat.body, limits.max_iterations)
        context = CallContext(tenant.id, request.headers)
        job = LoopJob(
            upstream=route.upstream,
            body={k: v for k, v in chat.body.items() if k != "n"},  # one loop per choice
            client_model=chat.model,
            upstream_model=route.model.target,
            server_tools=server_tools,
            client_tools=chat.client_tools,
            client_tool_names=chat.client_tool_names,
            limits=limits,
            context=context,
            registry=runtime.registry,
            keep=keep,
            single_call_id=single_call_id,
        )
        sessions = gateway.loop.sessions(job, n)
        exchange.session = sessions[0]  # their state is the request's
        if chat.stream:
            return await self._stream(chat, sessions, exchange, meter)
        outcomes = await gateway.loop.run_all(sessions)
        state = sessions[0].state
        completion = render_completion(outcomes, chat.model, state.usage.totals)
        if single_call_id is not None:
            completion = to_function_call(completion)
        exchange.headers["x-toolgate-iterations"] = str(state.iterations)
        exchange.headers["x-toolgate-tool-calls"] = str(state.tool_calls)
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
        sessions: list[LoopSession],
        exchange: Exchange,
        meter: Meter | None,
    ) -> Response:
        options = chat.body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        completion_id = f"chatcmpl-{exchange.request_id.removeprefix('req_')}"
        legacy = sessions[0].job.single_call_id is not None
        created = int(time.time())
        writers = [
            ChunkWriter(completion_id, chat.model, legacy=legacy, index=index, created=created)
            for index in range(len(sessions))
        ]
        state = sessions[0].state

        def closing() -> list[bytes]:
            if include_usage and state.usage:
                return [writers[0].usage(state.usage.totals), DONE]
            return [DONE]

        async def finished() -> None:
            if meter is not None:
                await meter(state.usage.totals)

        events = stream_loop(self._gateway.loop, sessions, writers, closing, finished)
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


def _completion(outcome: Outcome) -> dict[str, Any]:
    """The upstream's completion of a loop's last round, with the calls the client sees."""
    response = outcome.answer.raw
    assert response is not None  # a round not streamed has its completion
    if isinstance(outcome, HandBack):
        keep_calls(response, [dialect.call_dict(call) for call in outcome.calls])
    elif outcome.dropped:
        keep_calls(response, [])
    return response


def render_completion(outcomes: list[Outcome], model: str, usage: dict[str, Any]) -> dict[str, Any]:
    """The completion the client receives: one choice per loop, in order, usage summed
    over every round of every loop."""
    completions = [_completion(outcome) for outcome in outcomes]
    merged = completions[0]
    if len(completions) > 1:
        merged["choices"] = [
            {**completion["choices"][0], "index": index}
            for index, completion in enumerate(completions)
        ]
    return finalize(merged, model, usage)


def keep_calls(response: dict[str, Any], calls: list[dict[str, Any]]) -> None:
    """Leave only ``calls`` in the first choice (none: a plain answer, ``stop``)."""
    choice = response["choices"][0]
    message = choice["message"]
    if calls:
        message["tool_calls"] = calls
        choice["finish_reason"] = "tool_calls"
    else:
        message.pop("tool_calls", None)
        choice["finish_reason"] = "stop"


def finalize(response: dict[str, Any], model: str, usage: dict[str, Any]) -> dict[str, Any]:
    """The completion the client receives: its model name, summed usage, and the fields
    OpenAI's schema requires that some servers leave out."""
    response["model"] = model
    response.setdefault("object", "chat.completion")
    if usage:
        response["usage"] = usage
    for choice in response.get("choices", []):
        if isinstance(choice, dict):
            choice.setdefault("logprobs", None)
            message = choice.get("message")
            if isinstance(message, dict):
                message.setdefault("refusal", None)
                message.setdefault("content", None)
                if not message.get("tool_calls"):
                    message.pop("tool_calls", None)
    return response
