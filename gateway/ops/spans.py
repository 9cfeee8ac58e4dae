"""A request as OpenTelemetry GenAI spans (docs/design.md §14).

One SERVER span per request (``POST /v1/chat/completions``), whose parent is the
client's W3C ``traceparent`` when it sent a valid one; under it a CLIENT span
``chat {model}`` per upstream round and an INTERNAL span ``execute_tool {name}`` per
tool call, each the parent named by the ``traceparent`` its far side receives. Names
and attributes follow the OpenTelemetry GenAI semantic conventions (status
Development; the names of semconv 1.37 to 1.44, since moved to semantic-conventions-genai)
and the stable HTTP ones; what is Toolgate's own is under ``toolgate.``.

Message contents, tool arguments and results are recorded only with
``otel.capture_content`` on, then redacted (configured secrets, header-bound
arguments) and cut. Spans are made from explicit parents, never from the ambient
context: nothing here touches a context variable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from gateway.errors import GatewayError
from gateway.ops.redaction import forget_links_text
from gateway.values import AssistantMessage, Completion, ToolCall
from tool_registry import Redactor, dumps_text

# GenAI semantic conventions.
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHED_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
REASONING_TOKENS = "gen_ai.usage.reasoning.output_tokens"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_DESCRIPTION = "gen_ai.tool.description"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
# General and HTTP semantic conventions.
ERROR_TYPE = "error.type"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
HTTP_METHOD = "http.request.method"
HTTP_ROUTE = "http.route"
HTTP_STATUS = "http.response.status_code"
URL_SCHEME = "url.scheme"
USER_AGENT = "user_agent.original"
CLIENT_ADDRESS = "client.address"
REQUEST_ID_HEADER = "http.request.header.x-request-id"  # the client's own, if it sent one
RPC_STATUS = "rpc.response.status_code"  # an MCP server's JSON-RPC error code
MCP_METHOD = "mcp.method.name"
# Toolgate's own.
TENANT = "toolgate.tenant"
REQUEST_ID = "toolgate.request_id"
ROUND = "toolgate.round"
CHOICE = "toolgate.choice"
FORCED_FINAL = "toolgate.round.final"
TOOL_SOURCE = "toolgate.tool.source"
TOOL_OUTCOME = "toolgate.tool.outcome"
TOOL_REUSED = "toolgate.tool.reused"
TOOL_CACHED = "toolgate.tool.cached"
ITERATIONS = "toolgate.iterations"
TOOL_CALLS = "toolgate.tool_calls"
TOOL_CALLS_REUSED = "toolgate.tool_calls.reused"
COST_USD = "toolgate.cost_usd"
STOPPED = "toolgate.stopped"
POLICY_EVENT = "toolgate.policy"
CAP_EVENT = "toolgate.cap"
GUARDRAIL_EVENT = "toolgate.guardrail"  # a guardrail's verdict that did something

TOOL_KIND = "extension"  # run by the agent side (the gateway) against an external API
_DESCRIPTION_CHARS = 256
_HEADER_CHARS = 128
_SERVERS_KEPT = 64
_W3C = TraceContextTextMapPropagator()


def carrier(span: Span) -> dict[str, str]:
    """The W3C headers that name ``span`` as the parent on the far side."""
    context = span.get_span_context()
    headers = {
        "traceparent": f"00-{context.trace_id:032x}-{context.span_id:016x}-"
        f"{int(context.trace_flags):02x}"
    }
    if context.trace_state:
        headers["tracestate"] = context.trace_state.to_header()
    return headers


def error_type(exc: BaseException) -> str:
    """``error.type`` of what ended an operation: the gateway's error code, else the
    exception's class (a client that left: ``cancelled``)."""
    if isinstance(exc, GatewayError):
        return exc.code or exc.type
    if isinstance(exc, asyncio.CancelledError | GeneratorExit):
        return "cancelled"
    return type(exc).__qualname__


def _count(usage: Mapping[str, Any], *path: str) -> int | None:
    value: Any = usage
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value if type(value) is int and value >= 0 else None


def usage_attributes(usage: Any) -> dict[str, int]:
    """The token counts of a usage object (chat or Responses shape), as attributes;
    whatever is not a count is left out."""
    if not isinstance(usage, dict):
        return {}
    found = {
        INPUT_TOKENS: _count(usage, "prompt_tokens") or _count(usage, "input_tokens"),
        OUTPUT_TOKENS: _count(usage, "completion_tokens") or _count(usage, "output_tokens"),
        CACHED_INPUT_TOKENS: _count(usage, "prompt_tokens_details", "cached_tokens")
        or _count(usage, "input_tokens_details", "cached_tokens"),
        REASONING_TOKENS: _count(usage, "completion_tokens_details", "reasoning_tokens")
        or _count(usage, "output_tokens_details", "reasoning_tokens"),
    }
    return {name: value for name, value in found.items() if value is not None}


def output_messages(turn: AssistantMessage, finish_reason: str | None) -> list[dict[str, Any]]:
    """An assistant turn as the GenAI conventions write an output message."""
    parts: list[dict[str, Any]] = []
    if turn.content:
        parts.append({"type": "text", "content": turn.content})
    if turn.refusal:
        parts.append({"type": "refusal", "content": turn.refusal})
    parts += [_call_part(call) for call in turn.calls]
    return [{"role": "assistant", "parts": parts, "finish_reason": finish_reason or ""}]


def _call_part(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}


Attributes = dict[str, AttributeValue]  # a span's, as OpenTelemetry types them


class Spans:
    """The app's GenAI spans: its tracer, and what may be recorded of content."""

    def __init__(
        self, tracer: Tracer, redactor: Redactor, capture_content: bool, content_chars: int
    ) -> None:
        self._tracer = tracer
        self._redactor = redactor
        self.capture = capture_content
        self._chars = content_chars
        self._servers: dict[str, Attributes] = {}  # base URL → its server.* attributes

    def server(self, base_url: str) -> Attributes:
        """``server.address`` and ``server.port`` of a model server, worked out once."""
        found = self._servers.get(base_url)
        if found is None:
            if len(self._servers) >= _SERVERS_KEPT:
                self._servers.clear()
            parts = urlsplit(base_url)
            found = {}
            if parts.hostname:
                found[SERVER_ADDRESS] = parts.hostname
                found[SERVER_PORT] = parts.port or (443 if parts.scheme == "https" else 80)
            self._servers[base_url] = found
        return found

    def content(self, value: Any) -> str:
        """Content as a span may carry it: JSON text, configured secrets redacted (and
        connect links, ``forget_links``), cut.
        Each text in it is cut before it is encoded, so a huge one costs little more
        than a scan for secrets."""
        text = value if isinstance(value, str) else dumps_text(self._cut(value))
        return self._redactor.cut(forget_links_text(text), self._chars)

    def messages(self, items: Iterable[Any]) -> str:
        """Messages as a span may carry them: only as many as ``content_chars`` holds
        are taken (``items`` may be lazy: a long history is not converted whole)."""
        taken: list[Any] = []
        size = 0
        for item in items:
            taken.append(self._cut(item))
            size += len(dumps_text(taken[-1]))
            if size > self._chars:
                break
        return self.content(taken)

    def _cut(self, value: Any) -> Any:
        """``value`` with every text in it redacted and cut to ``content_chars``."""
        if isinstance(value, str):
            return self._redactor.cut(forget_links_text(value), self._chars)
        if isinstance(value, dict):
            return {key: self._cut(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self._cut(item) for item in value]
        return value

    def start(self, name: str, kind: SpanKind, parent: Span | None, attributes: Attributes) -> Span:
        context = trace.set_span_in_context(parent) if parent is not None else None
        return self._tracer.start_span(name, context, kind, attributes)

    def request(
        self,
        method: str,
        route: str,
        scheme: str,
        headers: Mapping[str, str],
        client: str | None,
        request_id: str,
    ) -> RequestSpan:
        """A request's span, its parent the client's ``traceparent`` when it is valid
        (an invalid one is ignored: the request starts a trace of its own)."""
        attributes: Attributes = {
            HTTP_METHOD: method,
            HTTP_ROUTE: route,
            URL_SCHEME: scheme,
            REQUEST_ID: request_id,  # the x-request-id it answers with
        }
        agent = headers.get("user-agent")
        if agent:
            attributes[USER_AGENT] = agent[:_HEADER_CHARS]
        given = headers.get("x-request-id")
        if given:
            attributes[REQUEST_ID_HEADER] = (given[:_HEADER_CHARS],)
        if client:
            attributes[CLIENT_ADDRESS] = client
        parent = _W3C.extract(headers)
        span = self._tracer.start_span(f"{method} {route}", parent, SpanKind.SERVER, attributes)
        return RequestSpan(self, span)

    def mcp_call(
        self, tool: str, meta: Mapping[str, Any] | None, headers: Mapping[str, str], request_id: str
    ) -> RequestSpan:
        """An MCP client's ``tools/call`` (``POST /mcp``) as a SERVER span
        ``tools/call {name}``, its parent the ``traceparent`` of the call's ``_meta``
        (MCP's SEP-414), else of the HTTP request."""
        carried = {
            key: value
            for key in ("traceparent", "tracestate")
            if isinstance(value := (meta or {}).get(key), str)
        }
        tool = tool[:_HEADER_CHARS]  # the client's, whatever it is
        attributes: Attributes = {
            MCP_METHOD: "tools/call",
            OPERATION: "execute_tool",
            TOOL_NAME: tool,
            REQUEST_ID: request_id,
        }
        parent = _W3C.extract(carried if "traceparent" in carried else headers)
        name = f"tools/call {tool}"
        span = self._tracer.start_span(name, parent, SpanKind.SERVER, attributes)
        return RequestSpan(self, span)


class RequestSpan:
    """One request's span, and the spans of its rounds and tool calls under it. When
    the request is not sampled, neither is anything under it: its rounds and tool calls
    cost no span at all, and pass the request's own (unsampled) context on."""

    __slots__ = ("_headers", "_spans", "sampled", "span", "trace_id")

    def __init__(self, spans: Spans, span: Span) -> None:
        self._spans = spans
        self.span = span
        self.trace_id = format(span.get_span_context().trace_id, "032x")
        self.sampled = span.is_recording()  # recorded, and exported
        self._headers: dict[str, str] | None = None

    @property
    def capture(self) -> bool:
        return self._spans.capture and self.sampled

    @property
    def headers(self) -> dict[str, str]:
        """What names this request's span as the parent (a request passed through)."""
        if self._headers is None:
            self._headers = carrier(self.span)
        return self._headers

    def round(
        self,
        provider: str,
        base_url: str,
        model: str,
        *,
        iteration: int,
        final: bool,
        max_tokens: int | None,
        choice: int = 0,
    ) -> RoundSpan:
        """A ``chat`` span for one upstream round."""
        if not self.sampled:
            return RoundSpan(self._spans, None, self.headers)
        attributes: Attributes = {
            OPERATION: "chat",
            PROVIDER: provider,
            REQUEST_MODEL: model,
            ROUND: iteration,
            FORCED_FINAL: final,
            **self._spans.server(base_url),
        }
        if max_tokens is not None:
            attributes[REQUEST_MAX_TOKENS] = max_tokens
        if choice:
            attributes[CHOICE] = choice
        span = self._spans.start(f"chat {model}", SpanKind.CLIENT, self.span, attributes)
        return RoundSpan(self._spans, span, carrier(span))

    def tool(self, name: str, call_id: str, source: str, description: str = "") -> ToolSpan:
        """An ``execute_tool`` span for one tool call."""
        if not self.sampled:
            return ToolSpan(self._spans, None, self.headers)
        name = name[:_HEADER_CHARS]  # a name the model made up may be anything
        attributes: Attributes = {
            OPERATION: "execute_tool",
            TOOL_NAME: name,
            TOOL_CALL_ID: call_id[:_HEADER_CHARS],
            TOOL_TYPE: TOOL_KIND,
            TOOL_SOURCE: source,
        }
        if description:
            attributes[TOOL_DESCRIPTION] = description[:_DESCRIPTION_CHARS]
        span = self._spans.start(f"execute_tool {name}", SpanKind.INTERNAL, self.span, attributes)
        return ToolSpan(self._spans, span, carrier(span))

    def finish(
        self,
        status: int,
        tenant: str,
        model: str,
        *,
        error: str | None = None,
        usage: Any = None,
        iterations: int | None = None,
        tool_calls: int | None = None,
        reused_calls: int | None = None,
        cost_usd: float | None = None,
        caps: Sequence[str] = (),
        stopped: str | None = None,
        guardrails: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        """The request is over: what it came to, then the span ends. ``guardrails``:
        the verdicts that did something (an event each, with what was found)."""
        span = self.span
        if self.sampled:
            attributes: Attributes = {HTTP_STATUS: status, TENANT: tenant}
            if model:
                attributes[REQUEST_MODEL] = model
            attributes |= usage_attributes(usage)
            for name, value in (
                (ITERATIONS, iterations),
                (TOOL_CALLS, tool_calls),
                (TOOL_CALLS_REUSED, reused_calls),
                (COST_USD, cost_usd),
                (STOPPED, stopped),
            ):
                if value is not None:
                    attributes[name] = value
            if error is not None and status >= 400:
                attributes[ERROR_TYPE] = error
            span.set_attributes(attributes)
            for kind in caps:
                span.add_event(CAP_EVENT, {"toolgate.cap.kind": kind})
            for verdict in guardrails:
                span.add_event(GUARDRAIL_EVENT, _flat("toolgate.guardrail", verdict))
            if status >= 500:  # a server span's error is the server's (HTTP conventions)
                span.set_status(Status(StatusCode.ERROR))
        span.end()

    def finish_call(self, tenant: str, outcome: str) -> None:
        """An MCP client's call is over (``mcp_call``): its outcome, then the span ends."""
        span = self.span
        if self.sampled:
            span.set_attributes({TENANT: tenant, TOOL_OUTCOME: outcome})
            if outcome != "ok":
                span.set_attribute(ERROR_TYPE, outcome)
                span.set_status(Status(StatusCode.ERROR))
        span.end()


class ChildSpan:
    """A span under a request's (None: the request is not sampled); ``headers`` (W3C)
    go with what it stands for, naming it as the far side's parent."""

    __slots__ = ("_spans", "headers", "span")

    def __init__(self, spans: Spans, span: Span | None, headers: dict[str, str]) -> None:
        self._spans = spans
        self.span = span
        self.headers = headers

    def failed(self, exc: BaseException) -> None:
        """An error ended it: its type, and an error status (no message: it may carry
        what a far side wrote)."""
        span = self.span
        if span is None:
            return
        if span.is_recording():
            span.set_attribute(ERROR_TYPE, error_type(exc))
            span.set_status(Status(StatusCode.ERROR))
        span.end()


class RoundSpan(ChildSpan):
    """One upstream round's ``chat`` span."""

    __slots__ = ()

    @property
    def capture(self) -> bool:
        """Whether the round's messages are recorded (``otel.capture_content``)."""
        return self._spans.capture and self.span is not None

    def answered(
        self, answer: Completion, transcript: Iterable[dict[str, Any]] | None = None
    ) -> None:
        """The round's answer came: what the model server said of it."""
        span = self.span
        if span is None:
            return
        if span.is_recording():
            attributes: Attributes = {**usage_attributes(answer.usage)}
            if answer.finish_reason:
                attributes[FINISH_REASONS] = (answer.finish_reason,)
            if answer.id:
                attributes[RESPONSE_ID] = answer.id[:_HEADER_CHARS]
            if answer.model:
                attributes[RESPONSE_MODEL] = answer.model[:_HEADER_CHARS]
            spans = self._spans
            if spans.capture:
                if transcript is not None:
                    attributes[INPUT_MESSAGES] = spans.messages(transcript)
                output = output_messages(answer.turn, answer.finish_reason)
                attributes[OUTPUT_MESSAGES] = spans.messages(output)
            span.set_attributes(attributes)
        span.end()


class ToolSpan(ChildSpan):
    """One tool call's ``execute_tool`` span."""

    __slots__ = ()

    def finished(
        self,
        outcome: str,
        status: int | None,
        *,
        code: str | None = None,
        reused: bool = False,
        cached: bool = False,
        why: Mapping[str, Any] | None = None,
        arguments: Any = None,
        result: str | None = None,
    ) -> None:
        """How the call went: its outcome, the HTTP status or MCP error code, whether
        an earlier call's result was reused, the policy point's verdict."""
        span = self.span
        if span is None:
            return
        if span.is_recording():
            attributes: Attributes = {TOOL_OUTCOME: outcome}
            if status is not None:
                attributes[HTTP_STATUS] = status
            if code is not None:
                attributes[RPC_STATUS] = code
            if reused:
                attributes[TOOL_REUSED] = True
            if cached:
                attributes[TOOL_CACHED] = True
            if outcome != "ok":
                attributes[ERROR_TYPE] = outcome
                span.set_status(Status(StatusCode.ERROR))
            spans = self._spans
            if spans.capture:
                if arguments is not None:
                    attributes[TOOL_ARGUMENTS] = spans.content(arguments)
                if result is not None:
                    attributes[TOOL_RESULT] = spans.content(result)
            span.set_attributes(attributes)
            if why:
                span.add_event(POLICY_EVENT, _flat("toolgate.policy", why))
        span.end()


def _flat(prefix: str, values: Mapping[str, Any]) -> Attributes:
    """A verdict's reasons as event attributes: scalars as they are, the rest as JSON."""
    flat: Attributes = {}
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, str | bool | int | float):
            flat[f"{prefix}.{key}"] = value
        else:
            flat[f"{prefix}.{key}"] = dumps_text(value)
    return flat
