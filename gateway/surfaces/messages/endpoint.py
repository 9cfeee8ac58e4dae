"""``POST /v1/messages`` and ``/v1/messages/count_tokens``: Anthropic's Messages API as a
surface (docs/design.md §20, docs/claude.md), for the ``anthropic`` SDKs and Claude Code
unchanged. It decodes into the same values as chat completions and Responses, so it
reaches a model server of any dialect; the gateway always runs its rounds (nothing is
passed through), with no tools of its own when none are in play."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from gateway.chat_json import encode_tool
from gateway.engine.estimate import estimate_tokens
from gateway.engine.report import RunReport
from gateway.errors import BadRequest, GatewayError
from gateway.ops.offload import offload
from gateway.policy.tenants import Tenant
from gateway.surfaces.approval_answers import asked_in
from gateway.surfaces.head import Admission, Head
from gateway.surfaces.http import Exchange, json_response, read_body
from gateway.surfaces.messages.render import MessageEvents, error_body, render_message
from gateway.surfaces.messages.request import MessagesRequest, parse_messages_request
from gateway.surfaces.request_end import Ended
from gateway.surfaces.skeleton import DROPPED_HEADER, Start
from gateway.surfaces.streaming import SSE
from gateway.values import Message, UsageCounts
from tool_registry import dumps

if TYPE_CHECKING:
    from gateway.runtime.services import Gateway


def claude_error(request: Request, exc: GatewayError, request_id: str) -> Response:
    """The boundary's rendering of an error on this surface: Anthropic's shape."""
    headers = {**exc.headers, "x-request-id": request_id, "request-id": request_id}
    return json_response(error_body(exc, request_id), exc.status, headers)


class ClaudeMessages:
    """``POST /v1/messages`` (its part of the request skeleton)."""

    forward_path = "/v1/messages"
    echoes_call_ids = True

    def parse(self, raw: bytes, headers: Mapping[str, str]) -> MessagesRequest:
        return parse_messages_request(raw, headers)

    def adapt(self, asked: MessagesRequest, tenant: Tenant) -> MessagesRequest:
        """Server-side tool types (``web_search_…``) are the tenant's ``hosted_tools`` to
        decide: refused here, or left out of what the model is offered."""
        if asked.hosted and tenant.hosted_tools == "refuse":
            first = asked.hosted[0]
            param = f"tools[{first.index}].type"
            raise BadRequest(
                f"'{param}': {first.type!r} is a server-side tool type, which this API key "
                "may not send (hosted_tools: refuse); its own tools are the tenant's server "
                "tools.",
                param=param,
            )
        return asked

    def call(self, asked: MessagesRequest, head: Head) -> MessagesCall:
        return MessagesCall(asked, head)


class MessagesCall:
    """One Messages request, after its head."""

    ended: Ended | None = None  # a Messages answer keeps nothing once answered

    framing = SSE

    def __init__(self, asked: MessagesRequest, head: Head) -> None:
        self._asked = asked
        self._head = head
        self._id = f"msg_{head.exchange.request_id.removeprefix('req_')}"
        self._writer: MessageEvents | None = None
        # Anthropic's header of every answer (the SDK's ``_request_id``), errors' too.
        head.exchange.headers["request-id"] = head.exchange.request_id

    async def decode(self) -> Start:
        asked, head = self._asked, self._head
        if asked.hosted:
            types = dict.fromkeys(h.type for h in asked.hosted)
            head.exchange.headers[DROPPED_HEADER] = ",".join(types)
        approvals = await offload(self._head.large, asked_in, asked.messages)
        return Start(asked.parameters, asked.messages, asked.client_tools, approvals)

    async def fit(self, history: list[Message], usage: list[UsageCounts | None]) -> list[Message]:
        return history  # the client's to fit

    async def render(self, report: RunReport) -> bytes:
        [outcome] = report.outcomes
        asked = self._asked
        stops = asked.stop_sequences
        return dumps(
            render_message(outcome, asked.model, report.usage, self._id, asked.thinking, stops)
        )

    def stream(self, n: int) -> MessagesCall:
        self._writer = MessageEvents(self._id, self._asked.model, self._asked.stop_sequences)
        return self

    @property
    def choices(self) -> Sequence[MessageEvents]:
        assert self._writer is not None  # a stream has its writer before its first event
        return [self._writer]

    async def close(self, report: RunReport) -> list[bytes]:
        assert self._writer is not None
        return self._writer.close(report.usage)


class TokenCount:
    """``POST /v1/messages/count_tokens``: the input tokens a request would send, as the
    gateway estimates them (its history, system text and the client's tools; not the
    server tools it adds), for clients that size their context before they ask."""

    def __init__(self, gateway: Gateway, admit: Admission) -> None:
        self._gateway = gateway
        self._admit = admit

    async def __call__(self, request: Request, exchange: Exchange) -> Response:
        runtime, tenant, _ = await self._admit(request, exchange)
        exchange.headers["request-id"] = exchange.request_id
        server = runtime.config.server
        raw = await read_body(request, exchange, server, self._gateway.large_bodies)
        asked = await offload(
            len(raw) > server.large_body_bytes, parse_messages_request, raw, request.headers, False
        )
        runtime.models.resolve(asked.model, tenant)
        exchange.model = asked.model
        tools = [
            Message("system", dumps(encode_tool(tool)).decode()) for tool in asked.client_tools
        ]
        return json_response({"input_tokens": estimate_tokens([*asked.messages, *tools])})
