"""The registry as an MCP server: ``POST /mcp`` (docs/design.md §12).

Any MCP client — a desktop agent, an IDE — lists and calls the calling tenant's tools
with the same governance as the chat loop: the tenant's key, its allowlist, its
``bind`` values (from the request's headers), the egress policy, its rate limit (each
HTTP request counts as one request), the tool-result cache, metrics and a trace per
call (``GET /v1/toolgate/traces/{x-request-id}``). A tenant can neither list nor call
another tenant's tools: a name outside its allowlist is an error result naming only
its own tools. With tracing on, a call is a span ``tools/call {name}`` whose parent is
the ``traceparent`` of its ``_meta`` (MCP's SEP-414), over the tool call's own span.

The protocol is the official ``mcp`` SDK's, stateless: the current revision and the
earlier session-based one both work, on any replica, with nothing kept between
requests. Calls run through ``ToolRunner`` exactly as a loop's calls do.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from gateway.engine.runner import ToolRunner
from gateway.errors import AuthError, GatewayError, settle
from gateway.ops.log_context import serving
from gateway.policy.identity import owner_of
from gateway.policy.ledger import Ledger
from gateway.policy.limits import Narrowing
from gateway.policy.tenants import Tenant
from gateway.runtime.snapshot import Runtime
from gateway.surfaces.head import Admission
from gateway.surfaces.http import Exchange, error_response, new_request_id
from gateway.surfaces.observe import Observer
from gateway.values import ToolCall
from tool_registry import CallContext, dumps_text, immutable

if TYPE_CHECKING:
    from gateway.runtime.services import Gateway

logger = logging.getLogger("gateway.mcp")

_STATE_KEY = "toolgate.mcp"


TOOLS_PAGE = 100  # tools in one tools/list answer
_CURSOR_CHARS = 400  # a cursor this server gives is never longer


def tools_page(names: Sequence[str], cursor: str | None) -> tuple[Sequence[str], str | None]:
    """The page of ``names`` a ``tools/list`` cursor asks for (None: the first), and
    the cursor of the next page (None: that was the last). A cursor names the last
    tool of the page before it, so a page stays right when a reload changes tools
    elsewhere in the list; one this server did not give is an invalid-params error."""
    start = 0
    if cursor is not None:
        after = _cursor_name(cursor)
        try:
            start = names.index(after) + 1
        except ValueError:
            raise MCPError(
                types.INVALID_PARAMS,
                "The cursor is not one this server gave, or its tool is gone: list again.",
            ) from None
    page = names[start : start + TOOLS_PAGE]
    more = start + TOOLS_PAGE < len(names)
    return page, base64.urlsafe_b64encode(page[-1].encode()).decode() if more else None


def _cursor_name(cursor: str) -> str:
    try:
        if len(cursor) > _CURSOR_CHARS:
            raise ValueError("too long")
        return base64.urlsafe_b64decode(cursor.encode("ascii")).decode()
    except ValueError:  # not base64 (binascii.Error), not ASCII or not UTF-8 either
        raise MCPError(types.INVALID_PARAMS, "The cursor is not one this server gave.") from None


@immutable
class Caller:
    """Who an MCP request is from, worked out once by the HTTP layer."""

    runtime: Runtime
    tenant: Tenant
    request_id: str
    headers: dict[str, str]
    identity: str  # ``identity.caller_identity``: who, within the tenant
    user: str | None = None  # the verified end user, when the tenant verifies them
    user_token: str | None = field(default=None, repr=False)  # the token that verified them


class McpEndpoint:
    __toolgate_boundary__ = True  # its own: ``__call__`` (an ASGI route, not a handler)

    def __init__(self, gateway: Gateway, admit: Admission, observer: Observer) -> None:
        self._gateway = gateway
        self._admit = admit
        self._observer = observer
        server: Server[Any] = Server(
            "toolgate",
            version="0.1.0",
            instructions="The tools this API key may use, run by Toolgate.",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        self._manager = StreamableHTTPSessionManager(
            app=server,
            stateless=True,
            json_response=True,
            max_request_body_size=gateway.config.server.max_body_bytes,
        )

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The SDK's session manager, for the app's life. It is held by a task of its
        own: its task group must be left by the task that entered it, and a lifespan's
        start and end need not run in one task (an in-process harness's do not)."""
        started, stop = asyncio.Event(), asyncio.Event()

        async def hold() -> None:
            async with self._manager.run():
                started.set()
                await stop.wait()

        task = asyncio.create_task(hold(), name="mcp endpoint")
        waiting = asyncio.create_task(started.wait())
        await asyncio.wait([task, waiting], return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if task.done():
            task.result()  # it failed to start: say why
        try:
            yield
        finally:
            stop.set()
            await task

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Admit the HTTP request as every route is (key, identity, rate limits), then
        hand it to the SDK. The boundary of this route: what fails before an answer
        began is the envelope, as ``http.endpoint`` renders it (the SDK answers its own
        protocol's errors)."""
        exchange = Exchange(new_request_id())
        serving(exchange)  # this task's log lines are the request's
        began = False

        async def sending(message: Message) -> None:
            nonlocal began
            began = began or message["type"] == "http.response.start"
            await send(message)

        try:
            await self._serve(scope, receive, sending, exchange)
        except Exception as exc:
            if began:
                raise
            if isinstance(exc, GatewayError):
                answered = exc
            else:
                logger.exception("unhandled error in request %s", exchange.request_id)
                answered = GatewayError(
                    f"The gateway failed to handle request {exchange.request_id}."
                )
            settle(exc)  # logged and answered: a value from here
            response = error_response(answered, exchange.request_id)
            for name, value in exchange.headers.items():
                if name not in response.headers:
                    response.headers[name] = value
            await response(scope, receive, send)

    async def _serve(self, scope: Scope, receive: Receive, send: Send, exchange: Exchange) -> None:
        request = Request(scope, receive)
        runtime, tenant, _ = await self._admit(request, exchange)
        request_id = exchange.request_id
        headers = {"x-request-id": request_id, **exchange.headers}
        caller = Caller(
            runtime=runtime,
            tenant=tenant,
            request_id=request_id,
            headers={k.lower(): v for k, v in request.headers.items()},
            identity=exchange.identity,
            user=exchange.user,
            user_token=exchange.user_token,
        )
        scope.setdefault("state", {})[_STATE_KEY] = caller
        extra = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self._manager.handle_request(scope, receive, send_with_headers)

    @staticmethod
    def _caller(ctx: Any) -> Caller:
        request = getattr(ctx, "request", None)
        state = getattr(request, "scope", {}).get("state", {}) if request is not None else {}
        caller = state.get(_STATE_KEY)
        if not isinstance(caller, Caller):  # not through ``__call__``: never served
            raise AuthError("No API key was checked for this request.")
        return caller

    async def _list_tools(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        """The tenant's tools, ``TOOLS_PAGE`` at a time (a catalog may hold thousands):
        a page ends with the cursor of the next, if there is one."""
        caller = self._caller(ctx)
        registry = caller.runtime.registry
        names = [name for name in caller.tenant.tools if name in registry]
        page, after = tools_page(names, params.cursor if params is not None else None)
        tools = []
        for name in page:
            tool = registry.get(name)
            if tool is None:
                continue
            definition = tool.definition
            policy = caller.tenant.policy.of(tool)
            tools.append(
                types.Tool(
                    name=name,
                    description=definition.description,
                    input_schema=dict(definition.parameters or {"type": "object"}),
                    annotations=types.ToolAnnotations(
                        read_only_hint=policy.effects == "read",
                        destructive_hint=policy.effects == "write",
                        open_world_hint=policy.output == "untrusted",
                    ),
                )
            )
        return types.ListToolsResult(tools=tools, next_cursor=after)

    async def _call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        caller = self._caller(ctx)
        gateway, tenant = self._gateway, caller.tenant
        started = time.perf_counter()
        # An MCP client cannot be asked to approve: an operator does, if anyone.
        policy, _ = gateway.request_policy(
            caller.runtime,
            tenant,
            Narrowing(),
            frozenset(),
            caller.identity,
            False,
            request_id=caller.request_id,
        )
        budget = gateway.budgets.for_tools(tenant, policy.limits)
        ledger = Ledger(budget=budget, taint=policy.input_taint)
        spans = self._observer.spans
        meta = params.meta if isinstance(params.meta, dict) else None
        trace = (
            spans.mcp_call(params.name, meta, caller.headers, caller.request_id)
            if spans is not None
            else None
        )
        runner = ToolRunner(
            policy=policy,
            ledger=ledger,
            executor=gateway.executor,
            context=CallContext(tenant.id, caller.headers, caller.user),
            cache=gateway.cache,
            metrics=gateway.metrics,
            trace=trace,
            credentials=gateway.credentials(
                caller.runtime, tenant.id, caller.user, caller.user_token
            ),
        )
        call = ToolCall(caller.request_id, params.name, dumps_text(params.arguments or {}))
        deadline = asyncio.get_running_loop().time() + tenant.limits.request_timeout_s
        runnable = min(1, tenant.limits.max_tool_calls)
        outcome = "cancelled"
        try:
            outputs, _ = await runner.run([call], runnable, deadline)
            record = runner.records[-1] if runner.records else None
            outcome = record.outcome if record is not None else "denied"
        finally:
            if budget is not None:
                await budget.close()
            if trace is not None:
                trace.finish_call(tenant.id, outcome)
        owner = owner_of(caller.identity, caller.user)
        await self._observer.tool_call(
            caller.request_id,
            tenant.id,
            params.name,
            outcome=outcome,
            started=started,
            registry=policy.registry,
            runner=runner,
            owner=owner,
        )
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=outputs[0].content)],
            is_error=outcome != "ok",
        )
