"""The Responses API surface of the loop (docs/design.md §10, §11): ``POST /v1/responses``
over the same engine, caps and policy as chat completions, and the stored responses
(``GET``/``DELETE /v1/responses/{id}``, ``GET /v1/responses/{id}/input_items``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.engine.estimate import estimate_tokens
from gateway.engine.loop import Final, HandBack
from gateway.engine.report import RunReport
from gateway.errors import BadRequest, NotFound
from gateway.ops.offload import offload
from gateway.policy.identity import owner_digest
from gateway.policy.tenants import Tenant
from gateway.store import StoreUnavailable
from gateway.store.conversations import Conversation, Entry
from gateway.store.responses import StoredResponse
from gateway.surfaces.approval_answers import asked_in
from gateway.surfaces.head import Admission, Head
from gateway.surfaces.http import Exchange, json_response
from gateway.surfaces.listing import page
from gateway.surfaces.request_end import Ended
from gateway.surfaces.responses.context_fit import (
    compact,
    compaction_threshold,
    truncate,
)
from gateway.surfaces.responses.conversation_routes import Conversations, visible_entries
from gateway.surfaces.responses.items import (
    approval_answers,
    stored_items,
    stored_items_json,
    to_messages,
)
from gateway.surfaces.responses.render import (
    ResponseEvents,
    ResponseShape,
    incomplete_reason,
    output_of,
)
from gateway.surfaces.responses.request import ResponsesRequest, parse_responses_request
from gateway.surfaces.skeleton import DROPPED_HEADER, Forward, Start
from gateway.surfaces.streaming import SSE
from gateway.upstream.port import ModelAsk
from gateway.values import CompletionRequest, Message, Parameters, UsageCounts, as_message
from tool_registry import dumps

STORED_HEADER = "x-toolgate-stored"  # "false": what the request asked to keep is not kept
logger = logging.getLogger("gateway.responses")


if TYPE_CHECKING:
    from gateway.policy.models import ModelRoute
    from gateway.runtime.services import Gateway


class Responses:
    """``POST /v1/responses`` (its part of the request skeleton) and the stored
    responses' routes."""

    forward_path = "/responses"
    echoes_call_ids = True

    def __init__(self, gateway: Gateway, admit: Admission, conversations: Conversations) -> None:
        self._gateway = gateway
        self._admit = admit
        self._conversations = conversations

    def parse(self, raw: bytes, headers: Mapping[str, str]) -> ResponsesRequest:
        return parse_responses_request(raw, headers)

    def adapt(self, asked: ResponsesRequest, tenant: Tenant) -> ResponsesRequest:
        """Hosted tool types (``web_search``, ...) are the tenant's ``hosted_tools`` to
        decide: refused here, or dropped (or passed on) in ``prepare``."""
        if asked.hosted and tenant.hosted_tools == "refuse":
            first = asked.hosted[0]
            param = f"tools[{first.index}].type"
            raise BadRequest(
                f"'{param}': {first.type!r} is a hosted tool type, which this API key may "
                "not send (hosted_tools: refuse); its own tools are the tenant's server tools.",
                param=param,
            )
        return asked

    def call(self, asked: ResponsesRequest, head: Head) -> ResponseCall:
        return ResponseCall(self, asked, head)

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


class ResponseCall:
    """One ``POST /v1/responses`` request, after its head: the conversation it
    continues, fitted, then kept with its answer."""

    framing = SSE

    def __init__(self, surface: Responses, asked: ResponsesRequest, head: Head) -> None:
        self._surface = surface
        self._gateway = surface._gateway
        self._asked = asked
        self._head = head
        self._shape = ResponseShape(asked)
        self._visible: list[Message] = []
        self._conversation: Conversation | None = None
        self._writer: ResponseEvents | None = None

    async def decode(self) -> Start | Forward:
        asked, head = self._asked, self._head
        if head.passes("openai") and head.route.upstream.responses_api:
            if asked.hosted and head.tenant.hosted_tools == "pass":
                return Forward("toolgate" in asked.body)  # it runs them itself
            body = self._without_hosted()
            return Forward(body is not None or "toolgate" in asked.body, body)
        self._without_hosted()  # the loop offers the model function tools only
        history: list[Message] = []
        taint: str | None = None
        tenant, identity = head.tenant, head.exchange.identity
        if asked.previous_response_id is not None:
            previous = await self._surface.owned(
                tenant, asked.previous_response_id, identity, "previous_response_id"
            )
            history, taint = previous.messages, previous.taint
        if asked.conversation is not None:
            self._conversation = await self._surface._conversations.owned(
                tenant.id, asked.conversation, identity, "conversation"
            )
            history = self._conversation.messages
            taint = taint or self._conversation.taint
        visible = [*history, *await offload(head.large, to_messages, asked.items)]
        # The approvals its input answers, with what the client echoes of each request.
        answered = dict.fromkeys(approval_answers(asked.items), (None, None))
        approvals = answered | await offload(head.large, asked_in, visible)
        # A client replaying its whole input gets the hidden rounds it never saw put
        # back; a stored response's history has them already.
        return Start(asked.params, visible, asked.client_tools, approvals, bool(history), taint)

    async def fit(self, history: list[Message], usage: list[UsageCounts | None]) -> list[Message]:
        """The conversation made to fit (kept so, later turns start from it), after
        the request's instructions."""
        asked = self._asked
        self._visible = await self._fit(asked, self._head.route, history, usage)
        system = [Message("system", asked.instructions)] if asked.instructions else []
        return [*system, *self._visible]

    def _without_hosted(self) -> dict[str, Any] | None:
        """The request with its hosted tools left out of what the upstream sees, and
        said (``x-toolgate-dropped-tools``); None when it had none."""
        hosted = self._asked.hosted
        if not hosted:
            return None
        body = self._asked.body
        dropped = {h.index for h in hosted}
        types = dict.fromkeys(h.type for h in hosted)
        self._head.exchange.headers[DROPPED_HEADER] = ",".join(types)
        return {**body, "tools": [t for i, t in enumerate(body["tools"]) if i not in dropped]}

    async def render(self, report: RunReport) -> bytes:
        [outcome] = report.outcomes
        calls = outcome.calls if isinstance(outcome, HandBack) else ()
        finish = outcome.finish_reason if isinstance(outcome, Final) else None
        incomplete = None if calls else incomplete_reason(finish)
        body = self._shape.response(
            "incomplete" if incomplete else "completed",
            output_of(outcome.answer.turn, calls, self._asked.client_names),
            report.usage,
            incomplete=incomplete,
        )
        encoded = dumps(body)
        if not await self._keep(report, body, encoded):
            encoded = dumps(self._not_stored(body))
        return encoded

    def stream(self, n: int) -> ResponseCall:
        self._writer = ResponseEvents(self._shape)
        return self

    @property
    def choices(self) -> Sequence[ResponseEvents]:
        """The one choice's writer (a response has one)."""
        assert self._writer is not None  # a stream has its writer before its first event
        return [self._writer]

    async def close(self, report: RunReport) -> list[bytes]:
        """The stream's last event: the whole response, kept before it is written."""
        assert self._writer is not None
        response = self._writer.last(report.usage)
        if not await self._keep(report, response):
            self._not_stored(response)
        return self._writer.close(response)

    # What it keeps is kept before its answer says so (``render``, ``close``): nothing
    # is left for the request's end.
    ended: Ended | None = None

    def _not_stored(self, body: dict[str, Any]) -> dict[str, Any]:
        """The answer as it must be when what it asked to keep could not be kept: it
        says ``store: false`` (and ``x-toolgate-stored: false``), so its client never
        relies on an id the store does not hold (docs/state.md)."""
        body["store"] = False
        self._head.exchange.headers[STORED_HEADER] = "false"
        return body

    async def _fit(
        self,
        asked: ResponsesRequest,
        route: ModelRoute,
        visible: list[Message],
        usage: list[UsageCounts | None],
    ) -> list[Message]:
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
            reserve = asked.params.max_tokens or 0
            budget = (
                context - reserve - estimate_tokens([Message("system", asked.instructions or "")])
            )
            visible = truncate(visible, budget)
        return visible

    async def _summarise(
        self, route: ModelRoute, usage: list[UsageCounts | None], messages: list[Message]
    ) -> str:
        """The same model's summary of ``messages``: one round, no tools."""
        model = self._gateway.model_servers.open(
            ModelAsk(
                route.upstream,
                route.model.target,
                Parameters(),
                messages,
                answer_tokens=route.model.max_output_tokens,
            )
        )
        await offload(self._head.large, model.prepare)  # a long conversation's encoding
        answer = await model.answer(CompletionRequest([], first=True, final=True))
        usage.append(answer.usage)
        return answer.turn.content or ""

    async def _keep(
        self, report: RunReport, body: dict[str, Any], encoded: bytes | None = None
    ) -> bool:
        """Keep a finished response, with the whole conversation through it: the
        visible history, the hidden rounds, and its last turn (with the server calls
        of a hand-back turn answered, so the client's outputs complete it); and add
        its input, hidden rounds and output to its conversation, if it has one.
        Whether all it was asked to keep is kept (each write retried within
        ``store.keep_retry_s``)."""
        [choice] = report.choices
        outcome = choice.outcome
        asked, tenant, conversation = self._asked, self._head.tenant, self._conversation
        large = self._head.large
        if outcome is None or body["status"] == "failed" or not (asked.store or conversation):
            return True
        turn = outcome.answer.turn
        if isinstance(outcome, HandBack):
            last = [as_message(turn), *(as_message(output) for output in choice.handed)]
        else:
            last = [Message("assistant", turn.content or "")]
        hidden = [as_message(item) for item in choice.hidden]
        # The input items as kept, with their ids: as objects where a conversation needs
        # them too (the same ids in both), else written item by item.
        items = [] if conversation is None else await offload(large, stored_items, asked.items)
        if asked.store:
            owner = owner_digest(self._head.exchange.identity)
            messages = [*self._visible, *hidden, *last]
            stored = StoredResponse(body, items, messages, owner, report.taint)
            written = None if conversation else await offload(large, stored_items_json, asked.items)
            kept = await self._gateway.responses.save(tenant.id, stored, encoded, written)
            del stored, messages, written  # a long session's: not held past its write
            if not kept:
                return False
        if conversation is not None:
            # The turn's messages go with the first output item; the rest stand for
            # nothing the turn message does not already carry.
            output = body["output"] or [None]
            conversation.taint = conversation.taint or report.taint
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
                return False
        return True
