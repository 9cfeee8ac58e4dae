"""Executing prepared tool calls over HTTP; every failure becomes a result for the model."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

import httpx

from .client import GuardedTransport, body_chunks, is_timeout
from .deadline import Deadline
from .egress import egress_denial
from .errors import EgressDenied, ToolArgumentsInvalid
from .logfields import FIELDS
from .redact import Redactor
from .request_builder import USER_AGENT, ToolRequest
from .results import ToolResult, decode_body, error_result, success_result
from .retry import backoff_delay, should_retry
from .spec import HttpSpec
from .tool import HttpRunner, HttpTool, PreparedCall
from .transport import Reply

logger = logging.getLogger("tool_registry.executor")

_RETRY_CAP_S = 5.0
MAX_REDIRECTS = 5
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_NO_HEADERS: Mapping[str, str] = httpx.Headers()  # of an attempt with no response: read only
_FAILURES: dict[type[BaseException], str] = {
    httpx.RemoteProtocolError: "did not answer with valid HTTP",
    httpx.UnsupportedProtocol: "redirected to a location that is not an HTTP URL",
    httpx.TooManyRedirects: "redirected too many times",
    httpx.ReadError: "broke off its answer",
}


def charset_of(headers: Mapping[str, str]) -> str | None:
    """The ``charset`` parameter of a response's content type, if it names one.
    (httpx's ``charset_encoding`` parses with ``email.message``: several times slower.)"""
    kind = headers.get("content-type", "")
    if "charset" not in kind.lower():
        return None
    for param in kind.split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            return value.strip().strip('"').strip("'") or None
    return None


def origin(url: httpx.URL) -> str:
    """``scheme://host:port`` of a URL: what log lines name, never the path or query."""
    port = f":{url.port}" if url.port is not None else ""
    host = f"[{url.host}]" if ":" in url.host else url.host  # an IPv6 address
    return f"{url.scheme}://{host}{port}"


def redirect_request(request: httpx.Request, response: Reply) -> httpx.Request:
    """The next hop of a redirect, as browsers and httpx do it: 303 (and 301/302 after
    POST) become GET without a body. On another origin (scheme, host or port) no
    configured or bound header goes along: only the user agent and the body's type.
    A ``Location`` that does not parse, or leaves HTTP, is the tool's protocol error."""
    try:
        url = request.url.join(response.headers["location"])
    except (httpx.InvalidURL, ValueError) as exc:
        raise httpx.RemoteProtocolError("the redirect location cannot be parsed") from exc
    if url.scheme not in ("http", "https") or not url.host:
        raise httpx.UnsupportedProtocol("the redirect leaves HTTP")
    method = request.method
    if (response.status_code == 303 and method != "HEAD") or (
        response.status_code in (301, 302) and method == "POST"
    ):
        method = "GET"
    content = request.content if method == request.method else None
    if (url.scheme, url.host, url.port) == (request.url.scheme, request.url.host, request.url.port):
        headers = httpx.Headers(request.headers)
        headers.pop("host", None)
        if content is None:
            headers.pop("content-length", None)
            headers.pop("content-type", None)
    else:
        headers = httpx.Headers({"user-agent": request.headers.get("user-agent", USER_AGENT)})
        if content is not None and "content-type" in request.headers:
            headers["content-type"] = request.headers["content-type"]
    return httpx.Request(
        method, url, headers=headers, content=content, extensions=request.extensions
    )


async def read_capped(response: Reply, limit: int) -> tuple[bytes, bool]:
    """Read at most ``limit`` bytes of the (decoded) body; say whether more was left."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in body_chunks(response):
        room = limit - size
        if len(chunk) > room:
            chunks.append(chunk[:room])
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), False


class ToolExecutor:
    """Runs tool calls through the one guarded transport (``create_tool_transport``)."""

    def __init__(
        self,
        transport: GuardedTransport,
        *,
        backoff_base_s: float = 0.2,
        redactor: Redactor | None = None,
    ) -> None:
        self._transport = transport
        self._backoff_base_s = backoff_base_s
        self.redactor = redactor or Redactor(())  # configured secrets: out of every result

    async def _send(self, request: ToolRequest, follow: bool) -> Reply:
        """Send, following redirects if asked; every hop passes the egress guard."""
        for _ in range(MAX_REDIRECTS + 1):
            response = await self._transport.call(request)
            if not follow or response.status_code not in _REDIRECT_STATUSES:
                return response
            if "location" not in response.headers:
                return response
            await response.aclose()
            request = ToolRequest.of(redirect_request(request.as_httpx(), response))
        raise httpx.TooManyRedirects("too many redirects", request=request.as_httpx())

    async def _exchange(self, request: ToolRequest, http: HttpSpec) -> tuple[Reply, bytes, bool]:
        """The request sent and its answer read, within ``max_response_bytes``."""
        response = await self._send(request, http.follow_redirects)
        try:
            body, truncated = await read_capped(response, http.max_response_bytes)
        finally:
            await response.aclose()
        return response, body, truncated

    async def execute(self, call: PreparedCall, deadline: float | None = None) -> ToolResult:
        """Make the call, retrying idempotent methods as configured. Never raises for
        HTTP trouble: non-2xx, timeouts, refused and failed connections are results.
        Configured secrets in what the tool answered are redacted before anyone reads it.

        ``deadline`` (event-loop time) is the caller's: reaching it raises
        ``TimeoutError``, where the tool's own ``timeout_s`` is a result. One timer
        serves both, whichever comes first."""
        redactor = self.redactor
        runner: HttpRunner = self
        if call.bearer is not None:  # the user's token: a secret of this call, in every form
            redactor = redactor.plus((call.bearer,))
            runner = _Redacting(self, redactor)
        result = await call.tool.run(call, deadline, runner)
        if redactor:
            whole = None if result.whole is None else redactor.text(result.whole)
            content = redactor.text(result.content)
            return ToolResult(
                content, result.outcome, result.status, result.code, whole, result.max_chars
            )
        return result

    async def run_http(
        self, tool: HttpTool, call: PreparedCall, deadline: float | None
    ) -> ToolResult:
        """An HTTP tool's call (``HttpTool.run``): build the request and send it."""
        return await self.send_http(tool, call, deadline, self.redactor)

    async def send_http(
        self, tool: HttpTool, call: PreparedCall, deadline: float | None, redactor: Redactor
    ) -> ToolResult:
        """``run_http``, its result read with ``redactor`` (the call's)."""
        http = tool.spec.http
        try:
            request = tool.request.build(call.arguments)
        except ToolArgumentsInvalid as exc:
            return error_result(str(exc), "invalid_args")
        except (httpx.InvalidURL, ValueError):
            return error_result("the arguments do not make a valid request URL", "invalid_args")
        if call.trace and http.trace_context:
            request = request.with_headers({k.lower(): v for k, v in call.trace.items()})
        if call.bearer is not None:  # the user's own token (no redirect is followed)
            request = request.with_headers({"authorization": f"Bearer {call.bearer}"})
        attempts = 1 + (http.retries if http.idempotent else 0)
        clock = asyncio.get_running_loop()
        for attempt in range(attempts):
            result, headers = await self._attempt(tool, request, clock, deadline, redactor)
            retryable = result.outcome == "timeout" or (
                result.outcome == "http_error"
                and (result.status is None or should_retry(result.status, headers))
            )
            if not retryable or attempt == attempts - 1:
                return result
            delay = backoff_delay(attempt, headers, self._backoff_base_s, cap_s=_RETRY_CAP_S)
            if deadline is not None and clock.time() + delay >= deadline:
                raise TimeoutError  # the caller's time ends before the next attempt
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _attempt(
        self,
        tool: HttpTool,
        request: ToolRequest,
        clock: asyncio.AbstractEventLoop,
        deadline: float | None,
        redactor: Redactor,
    ) -> tuple[ToolResult, Mapping[str, str]]:
        spec = tool.spec
        no_headers = _NO_HEADERS
        ends = clock.time() + spec.http.timeout_s
        callers = deadline is not None and deadline <= ends  # the caller's time ends first
        limit = Deadline(ends if deadline is None else min(ends, deadline))
        try:
            response, body, truncated = await limit.within(self._exchange(request, spec.http))
        except EgressDenied as exc:
            return self._denied(tool, exc), no_headers
        except (TimeoutError, httpx.HTTPError) as exc:
            if callers and isinstance(exc, TimeoutError):
                raise
            denial = egress_denial(exc)
            if denial is not None:
                return self._denied(tool, denial), no_headers
            where = origin(request.url)
            if is_timeout(exc):
                logger.warning(
                    "tool %s timed out after %ss",
                    tool.name,
                    spec.http.timeout_s,
                    extra={FIELDS: {"tool": tool.name, "origin": where, "outcome": "timeout"}},
                )
                message = f"the tool timed out after {spec.http.timeout_s:g}s"
                return error_result(message, "timeout"), no_headers
            reason = _FAILURES.get(type(exc), "could not be reached")
            logger.warning(
                "tool %s failed: %s",
                tool.name,
                type(exc).__name__,
                extra={FIELDS: {"tool": tool.name, "origin": where, "outcome": "http_error"}},
            )
            return error_result(f"the tool {reason}", "http_error"), no_headers
        finally:
            limit.close()
        if 200 <= response.status_code < 300:
            result = success_result(
                spec.result,
                response.status_code,
                body,
                charset_of(response.headers),
                truncated,
                redactor,
            )
            return result, response.headers
        text = decode_body(body, charset_of(response.headers))
        message = f"HTTP {response.status_code} {response.reason_phrase}".strip()
        result = error_result(message, "http_error", response.status_code, text, redactor)
        return result, response.headers

    @staticmethod
    def _denied(tool: HttpTool, exc: EgressDenied) -> ToolResult:
        logger.warning(
            "tool %s refused by the egress guard: %s",
            tool.name,
            exc,
            extra={FIELDS: {"tool": tool.name, "outcome": "denied"}},
        )
        return error_result("the egress guard refused this tool's destination", "denied")


class _Redacting:
    """The executor as one call's runner: its results read with the call's redactor."""

    __slots__ = ("_executor", "redactor")

    def __init__(self, executor: ToolExecutor, redactor: Redactor) -> None:
        self._executor = executor
        self.redactor = redactor

    async def run_http(
        self, tool: HttpTool, call: PreparedCall, deadline: float | None
    ) -> ToolResult:
        return await self._executor.send_http(tool, call, deadline, self.redactor)
