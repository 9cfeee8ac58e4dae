"""The Responses API surface of the loop (DESIGN.md §10, §11): ``POST /v1/responses``
over the same engine, caps and policy as chat completions, and the stored responses
(``GET``/``DELETE /v1/responses/{id}``, ``GET /v1/responses/{id}/input_items``)."""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, Any

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response

from gateway.engine.loop import HandBack, LoopJob, Run
from gateway.engine.stream import stream_loop
from gateway.errors import NotFound
from gateway.policy.identity import owner_digest
from gateway.policy.point import PolicyPoint
from gateway.policy.tenants import Tenant
from gateway.store import StoreUnavailable
from gateway.store.conversations import Conversation, Entry
from gateway.store.responses import StoredResponse
from gateway.surfaces.event_stream import start_event_stream
from gateway.surfaces.forward import forward_json
from gateway.surfaces.http import Exchange, json_response, read_body
from gateway.surfaces.listing import page
from gateway.surfaces.responses.context_fit import (
    compact,
    compaction_threshold,
    estimate_tokens,
    truncate,
)
from gateway.surfaces.responses.conversations import Conversations, visible_entries
from gateway.surfaces.responses.items import stored_items, to_messages
from gateway.surfaces.responses.render import (
    ResponseEvents,
    ResponseShape,
    incomplete_reason,
    output_of,
)
from gateway.surfaces.responses.request import ResponsesRequest, parse_responses_request
from gateway.surfaces.skeleton import SHADOWED_HEADER, first_byte, loop_headers
from gateway.upstream import dialect
from gateway.upstream.chat_model import ChatModel
from tool_registry import CallContext
from tool_registry.jsonio import dumps

logger = logging.getLogger("gateway.responses")

if TYPE_CHECKING:
    from gateway.policy.models import Route
    from gateway.runtime.services import Gateway
    from gateway.surfaces.forward import Meter
    from gateway.surfaces.skeleton import Admit


class Responses:
    """``POST /v1/responses`` and the stored responses' routes."""

    def __init__(self, gateway: Gateway, admit: Admit, conversations: Conversations) -> None:
        self._gateway = gateway
        self._admit = admit
        self._conversations = conversations

    async def create(self, request: Request, exchange: Exchange) -> Response:
        gateway = self._gateway
        runtime, tenant, meter = await self._admit(request, exchange)
        server = runtime.config.server
        raw = await read_body(request, exchange, server.max_body_bytes, server.body_timeout_s)
        asked = parse_responses_request(raw, request.headers)
        route = runtime.models.resolve(asked.model, tenant)
        exchange.model = asked.model
        policy, shadowed = PolicyPoint.of_request(
            tenant.tools, tenant.limits, asked.narrowing, asked.client_tool_names, runtime.registry
        )
        server_tools = policy.server_tools
        if shadowed:
            exchange.headers[SHADOWED_HEADER] = ",".join(shadowed)
        if not server_tools and route.upstream.responses_api:
            return await forward_json(
                gateway.upstream,
                route,
                "/responses",
                raw,
                asked.body,
                "toolgate" in asked.body,
                asked.model,
                stream=asked.stream,
                meter=meter,
                on_usage=partial(setattr, exchange, "usage"),
            )
        history: list[dict[str, Any]] = []
        identity = exchange.identity
        if asked.previous_response_id is not None:
            previous = await self.owned(
                tenant, asked.previous_response_id, identity, "previous_response_id"
            )
            history = previous.messages
        conversation = None
        if asked.conversation is not None:
            conversation = await self._conversations.owned(
                tenant.id, asked.conversation, identity, "conversation"
            )
            history = conversation.messages
        visible = [*history, *to_messages(asked.items)]
        turns = gateway.turns
        keep = None
        if server_tools and asked.client_tool_names:
            keep = turns.keeper(tenant.id, visible, identity)
        if not history and any(m.get("role") == "tool" for m in visible):
            # A client replaying its whole input: put back the hidden rounds it never
            # saw. A stored response's history has them already.
            visible = await turns.restore(tenant.id, visible, identity) or visible
        summary_usage: list[Any] = []
        visible = await self._fit(asked, route, visible, summary_usage)
        system = [{"role": "system", "content": asked.instructions}] if asked.instructions else []
        model = ChatModel(
            gateway.upstream,
            route.upstream,
            {**asked.params, "messages": [*system, *visible]},
            route.model.target,
            [*runtime.registry.definitions(server_tools), *asked.client_tools],
            asked.client_tool_names,
        )
        job = LoopJob(model, policy, CallContext(tenant.id, request.headers), keep)
        [session] = gateway.loop.runs(job)
        for usage in summary_usage:
            session.state.usage.add(usage)  # the compaction's tokens are the request's
        exchange.session = session
        shape = ResponseShape(asked)
        store = partial(
            self._keep, tenant, owner_digest(identity), asked, visible, session, conversation
        )
        if asked.stream:
            return await self._stream(asked, session, shape, exchange, meter, store)
        outcome = await gateway.loop.run(session)
        calls = outcome.calls if isinstance(outcome, HandBack) else ()
        incomplete = None if calls else incomplete_reason(outcome.answer.finish_reason)
        usage = session.state.usage.totals
        body = shape.response(
            "incomplete" if incomplete else "completed",
            output_of(outcome.answer.turn, calls),
            usage,
            incomplete=incomplete,
        )
        encoded = dumps(body)
        await store(body, encoded)
        exchange.headers |= loop_headers(session)
        response = Response(encoded, media_type="application/json")
        if meter is not None:
            response.background = BackgroundTask(meter, usage)
        return response

    async def _fit(
        self,
        asked: ResponsesRequest,
        route: Route,
        visible: list[dict[str, Any]],
        usage: list[Any],
    ) -> list[dict[str, Any]]:
        """A long conversation made to fit: compacted into a summary the same model
        writes (its usage added to ``usage``), or truncated to the model's
        ``context_tokens``, as the request asks. The fitted conversation is what is
        stored, so later turns start from it."""
        threshold = compaction_threshold(asked.body.get("context_management"))
        if threshold is not None:
            limit = threshold or route.model.context_tokens
            if limit:
                summarise = partial(self._summarise, route, usage)
                visible = await compact(visible, limit, summarise) or visible
        context = route.model.context_tokens
        if asked.body.get("truncation") == "auto" and context is not None:
            reserve = asked.params.get("max_tokens") or 0
            budget = (
                context
                - reserve
                - estimate_tokens([{"role": "system", "content": asked.instructions or ""}])
            )
            visible = truncate(visible, budget)
        return visible

    async def _summarise(
        self, route: Route, usage: list[Any], messages: list[dict[str, Any]]
    ) -> str:
        body = {"model": route.model.target, "messages": messages}
        answer = dialect.parse_completion(await self._gateway.upstream.chat(route.upstream, body))
        usage.append(answer.usage)
        return answer.turn.content or ""

    async def _keep(
        self,
        tenant: Tenant,
        owner: str,
        asked: ResponsesRequest,
        visible: list[dict[str, Any]],
        session: Run,
        conversation: Conversation | None,
        body: dict[str, Any],
        encoded: bytes | None = None,
    ) -> None:
        """Keep a finished response, with the whole conversation through it: the
        visible history, the hidden rounds, and its last turn (with the server calls
        of a hand-back turn answered, so the client's outputs complete it); and add
        its input, hidden rounds and output to its conversation, if it has one."""
        outcome = session.outcome
        if outcome is None or body["status"] == "failed":
            return
        turn = outcome.answer.turn
        if isinstance(outcome, HandBack):
            last = [dialect.turn_message(turn), *dialect.messages(session.handed_outputs)]
        else:
            last = [{"role": "assistant", "content": turn.content or ""}]
        hidden = dialect.messages(session.hidden)
        items = stored_items(asked.items)
        if asked.store:
            stored = StoredResponse(body, items, [*visible, *hidden, *last], owner)
            await self._gateway.responses.save(tenant.id, stored, encoded)
        if conversation is not None:
            # The turn's messages go with the first output item; the rest stand for
            # nothing the turn message does not already carry.
            output = body["output"] or [None]
            conversation.entries += [
                *visible_entries(items),
                Entry(None, hidden),
                Entry(output[0], last),
                *(Entry(item, []) for item in output[1:]),
            ]
            try:
                await self._gateway.conversations.save(tenant.id, conversation)
            except StoreUnavailable:
                logger.warning("conversation %s not updated: store unavailable", conversation.id)

    async def _stream(
        self,
        asked: ResponsesRequest,
        session: Run,
        shape: ResponseShape,
        exchange: Exchange,
        meter: Meter | None,
        store: Any,
    ) -> Response:
        writer = ResponseEvents(shape)
        state = session.state
        done: list[dict[str, Any]] = []

        def closing() -> list[bytes]:
            events = writer.close(state.usage.totals)
            done.append(writer.last_response)
            return events

        async def finished() -> None:
            if done:
                await store(done[0])
            if meter is not None:
                await meter(state.usage.totals)

        events = stream_loop(self._gateway.loop, [session], [writer], closing, finished)
        return await start_event_stream(events, partial(first_byte, exchange))

    async def retrieve(self, request: Request, exchange: Exchange) -> Response:
        stored = await self._load(request, exchange)
        return json_response(stored.response)

    async def input_items(self, request: Request, exchange: Exchange) -> Response:
        stored = await self._load(request, exchange)
        return json_response(page(stored.input_items, request.query_params))

    async def delete(self, request: Request, exchange: Exchange) -> Response:
        stored = await self._load(request, exchange)
        response_id = stored.response["id"]
        if not await self._gateway.responses.delete(exchange.tenant, response_id):
            raise NotFound(f"No response {response_id!r} is stored for this key.")
        return json_response({"id": response_id, "object": "response.deleted", "deleted": True})

    async def _load(self, request: Request, exchange: Exchange) -> StoredResponse:
        _, tenant, _ = await self._admit(request, exchange)
        return await self.owned(tenant, request.path_params["response_id"], exchange.identity)

    async def owned(
        self, tenant: Tenant, response_id: str, identity: str, param: str | None = None
    ) -> StoredResponse:
        """The stored response, if ``identity`` (of ``tenant``) made it; else not found."""
        stored = await self._gateway.responses.load(tenant.id, response_id)
        if stored is None or stored.owner != owner_digest(identity):
            raise NotFound(f"No response {response_id!r} is stored for this key.", param=param)
        return stored
