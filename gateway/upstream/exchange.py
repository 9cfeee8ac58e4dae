"""The exchange with upstream model servers that every dialect shares: retries, key
injection, error mapping (docs/design.md §20: a dialect brings its paths, its
credentials' headers and its codec).

Every I/O error of an upstream exchange becomes the gateway's error tree in one place,
``upstream_errors``, as httpx's ``map_httpcore_exceptions`` does for its transports:
what the client reads depends only on the stage the exchange was in.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, Literal, TypeVar

import anyio
import httpx

from gateway.config import UpstreamConfig
from gateway.errors import UpstreamError, UpstreamStatusError, UpstreamTimeout
from gateway.ops.metrics import Metrics, status_class
from gateway.upstream.sse import SSEParser
from gateway.upstream.wire import Answer, Wire
from tool_registry import (
    FIELDS,
    backoff_delay,
    loads,
    loads_object,
    retry_after_s,
    should_retry,
)

logger = logging.getLogger("gateway.upstream")

_PASSED_STATUSES = frozenset({400, 413, 422, 429})  # the client's own doing: passed on
_MESSAGE_CHARS = 1000
_FAILURE_CHARS = 300  # of a failed upstream's own message, passed on
_PROBE_BYTES = 4096  # of a probe's answer, read for its message
_URLS_KEPT = 64
RETRY_WAIT_BUDGET_S = 2.0  # the longest Retry-After the gateway waits out itself

# The headers that carry an upstream's credentials, made from its configuration.
Auth = Callable[[UpstreamConfig], Mapping[str, str]]
# A request's headers signed (method, URL, headers, body): AWS's SigV4, per attempt.
Sign = Callable[[UpstreamConfig, str, str, Mapping[str, str], bytes], Awaitable[Mapping[str, str]]]


def bearer(upstream: UpstreamConfig) -> Mapping[str, str]:
    """An OpenAI-compatible server's: ``Authorization: Bearer`` with its key, if any."""
    if upstream.api_key is not None and upstream.api_key.get_secret_value():
        return {"authorization": f"Bearer {upstream.api_key.get_secret_value()}"}
    return {}


Stage = Literal["send", "read", "stream"]


class _UpstreamErrors:
    """The context manager of ``upstream_errors`` (a class: it runs on every exchange)."""

    __slots__ = ("_name", "_stage")

    def __init__(self, name: str, stage: Stage) -> None:
        self._name = name
        self._stage = stage

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(exc, httpx.TransportError):
            raise _mapped(self._name, self._stage, exc) from exc


def _mapped(name: str, stage: Stage, exc: httpx.TransportError) -> UpstreamError:
    server = f"The upstream model server {name!r}"
    if stage == "send":
        # Only a server that took the request and went quiet has timed out; a connect
        # timeout, like a refusal, means it could not be reached (and is retried).
        if isinstance(exc, httpx.ReadTimeout):
            return UpstreamTimeout(f"{server} did not answer in time.")
        return UpstreamError(
            f"{server} could not be reached. Check that it runs at the base_url configured "
            "for it; `toolgate check --probe` tries every upstream.",
            code="upstream_unavailable",
        )
    if isinstance(exc, httpx.TimeoutException):
        if stage == "read":
            return UpstreamTimeout(f"{server} did not answer in time.")
        return UpstreamTimeout(f"{server} stalled.")
    return UpstreamError(f"{server} broke off its answer.")


async def close_quietly(response: Answer) -> None:
    """Close an upstream response even while the request is being cancelled."""
    with anyio.CancelScope(shield=True):
        await response.aclose()


def upstream_errors(name: str, stage: Stage) -> _UpstreamErrors:
    """Re-raise httpx's errors of an exchange with upstream ``name`` as ``UpstreamError``s:
    ``send`` (until the status line), ``read`` (a whole body), ``stream`` (a stream's
    events). Anything else passes untouched."""
    return _UpstreamErrors(name, stage)


def upstream_error_message(body: bytes) -> str | None:
    """The ``error.message`` of an OpenAI-style error body, if it has one."""
    try:
        data = loads(body)
    except ValueError:
        return None
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])[:_MESSAGE_CHARS]
    if isinstance(error, str):
        return error[:_MESSAGE_CHARS]
    return None


def map_status_error(
    upstream: str, response: Answer, body: bytes, said: str | None = None
) -> UpstreamError:
    """The error a client gets for an upstream's error status.

    What the client caused (400, 413, 422) or may retry (429) keeps its status and the
    upstream's message; the upstream refusing the gateway itself (401, 403, 404) is a
    502 that does not pass the upstream's words on; its failing (5xx) is the 502 of
    ``server_failed``. ``said``: the upstream's message, where its dialect does not
    write OpenAI's error shape.
    """
    status = response.status_code
    said = upstream_error_message(body) if said is None else said[:_MESSAGE_CHARS]
    if status in _PASSED_STATUSES:
        message = said or f"The upstream answered HTTP {status}."
        headers = {}
        if status == 429:
            for name in ("retry-after", "retry-after-ms"):
                if name in response.headers:
                    headers[name] = response.headers[name]
        error_type = "rate_limit_error" if status == 429 else "invalid_request_error"
        return UpstreamStatusError(
            message, status=status, error_type=error_type, code="upstream_error", headers=headers
        )
    logger.warning(
        "upstream %s answered HTTP %s",
        upstream,
        status,
        extra={FIELDS: {"upstream": upstream, "status": status}},
    )
    if status >= 500:
        return server_failed(upstream, f"HTTP {status}", said)
    return UpstreamStatusError(
        f"The upstream model server {upstream!r} answered HTTP {status}.", status=502
    )


def server_failed(upstream: str, how: str, message: str | None) -> UpstreamError:
    """The one error of an upstream that failed — an HTTP 5xx, or an error event in
    its stream, before or after its first byte: a 502 in the same words, with the
    server's own message, its first line only and bounded (no stack trace follows it;
    configured secrets are redacted from every response). ``how`` it failed is said
    only when the server said nothing."""
    text = f"The upstream model server {upstream!r} failed"
    said = _first_line(message)
    return UpstreamStatusError(f"{text}: {said}" if said else f"{text} ({how}).", status=502)


def _first_line(message: str | None) -> str:
    if not message:
        return ""
    line = message.strip().splitlines()[0] if message.strip() else ""
    line = "".join(c for c in line if c.isprintable())
    return line if len(line) <= _FAILURE_CHARS else line[: _FAILURE_CHARS - 1] + "…"


T = TypeVar("T")

# An answer past this is parsed and translated in a worker thread: 50 MB of a model's tool
# input held the event loop for half a second (orjson, then the codec's own dumps).
LARGE_ANSWER_BYTES = 1024 * 1024


async def large_answer_of(
    upstream: str,
    data: bytes,
    read: Callable[[dict[str, Any]], T],
    parse: Callable[[str, bytes], dict[str, Any]] | None = None,
) -> T:
    """A large whole answer (past ``LARGE_ANSWER_BYTES``: a client reads a smaller one
    itself, with no coroutine or thread) ``parse``d (``whole_object`` unless said) and
    ``read`` into the round's values, both in a worker thread: a model's 50 MB tool
    input is parsed, then encoded again as the call's arguments."""
    whole = parse or whole_object
    return await asyncio.to_thread(lambda: read(whole(upstream, data)))


def whole_object(upstream: str, data: bytes) -> dict[str, Any]:
    """An answer's JSON object, parsed; else an ``UpstreamError`` saying it is not one."""
    parsed = loads_object(data)
    if parsed is None:
        raise UpstreamError(f"The upstream model server {upstream!r} answered with invalid JSON.")
    return parsed


async def read_all(upstream: UpstreamConfig, response: Answer) -> bytes:
    """The whole body of an upstream response, which is closed afterwards."""
    try:
        with upstream_errors(upstream.name, "read"):
            return await response.aread()
    finally:
        await response.aclose()


async def sse_data(upstream: UpstreamConfig, response: Answer) -> AsyncGenerator[str, None]:
    """The ``data`` of an upstream's event stream as it comes (``[DONE]`` included),
    its errors mapped; the response is closed at the end, however it ends."""
    parser = SSEParser()
    try:
        with upstream_errors(upstream.name, "stream"):
            async for chunk in response.aiter_raw():
                for data in parser.feed(chunk):
                    yield data
            for data in parser.close():
                yield data
    finally:
        await close_quietly(response)


class UpstreamClient:
    """Sends requests to upstream model servers with the upstream's own credentials
    (``auth``: a dialect's headers for them), retrying what its dialect says is worth
    another attempt (``retryable``). Clients of several dialects share one
    ``trouble`` (what ``/readyz`` and the console show)."""

    def __init__(
        self,
        wire: Wire,
        *,
        auth: Auth = bearer,
        sign: Sign | None = None,
        retryable: Callable[[int, Mapping[str, str]], bool] = should_retry,
        backoff_base_s: float = 0.5,
        metrics: Metrics | None = None,
        trouble: dict[str, str] | None = None,
    ) -> None:
        self._wire = wire
        self._auth = auth
        self._sign = sign
        self._retryable = retryable
        self._metrics = metrics
        self._backoff_base_s = backoff_base_s
        # By upstream name, for the configuration object they were made from: a reload
        # brings new objects, so rotated keys and moved base URLs take effect.
        self._prepared: dict[
            str, tuple[UpstreamConfig, dict[str, str], dict[str, float | None]]
        ] = {}
        self._urls: dict[tuple[str, str], tuple[UpstreamConfig, str]] = {}
        # By upstream name, how its last exchange went, when that was not an answer:
        # ``loading`` (its probe said so), ``unavailable`` (HTTP 503), ``unreachable``.
        self.trouble: dict[str, str] = trouble if trouble is not None else {}

    def _prepare(self, upstream: UpstreamConfig) -> tuple[dict[str, str], dict[str, float | None]]:
        """Headers and timeouts of an upstream, worked out once."""
        prepared = self._prepared.get(upstream.name)
        if prepared is None or prepared[0] is not upstream:
            headers = {"content-type": "application/json", **upstream.headers}
            headers.update(self._auth(upstream))
            timeout = httpx.Timeout(upstream.timeout_s, connect=upstream.connect_timeout_s)
            prepared = self._prepared[upstream.name] = (upstream, headers, timeout.as_dict())
        return prepared[1], prepared[2]

    def _url(self, upstream: UpstreamConfig, path: str) -> str:
        """The URL, encoded (as httpx encodes it), worked out once per upstream and path."""
        known = self._urls.get((upstream.name, path))
        if known is not None and known[0] is upstream:
            return known[1]
        if len(self._urls) >= _URLS_KEPT:
            self._urls.clear()
        url = str(httpx.URL(upstream.base_url + path))
        self._urls[(upstream.name, path)] = (upstream, url)
        return url

    async def probe(
        self, upstream: UpstreamConfig, path: str = "/models", timeout_s: float = 3.0
    ) -> tuple[int, str]:
        """``GET {base_url}{path}`` once (no retries, no metrics): the status it
        answered and the start of its error message, if any (signed as every request
        is, so that a refused credential shows). Raises ``httpx.TransportError`` or
        ``TimeoutError`` when nothing did."""
        prepared, _ = self._prepare(upstream)
        headers: Mapping[str, str] = {k: v for k, v in prepared.items() if k != "content-type"}
        url = self._url(upstream, path)
        async with asyncio.timeout(timeout_s):
            if self._sign is not None:
                headers = await self._sign(upstream, "GET", url, headers, b"")
            response = await self._wire.send(
                "GET", url, headers, b"", httpx.Timeout(timeout_s).as_dict()
            )
            try:
                body = await anext(aiter(response.aiter_raw()), b"")
            except httpx.HTTPError:
                body = b""
            finally:
                await response.aclose()
        status = response.status_code
        message = upstream_error_message(body[:_PROBE_BYTES]) if status >= 400 else None
        if status == 503 and "loading" in (message or "").lower():
            self.trouble[upstream.name] = "loading"
        elif status == 503:
            self.trouble[upstream.name] = "unavailable"
        else:
            self.trouble.pop(upstream.name, None)
        return status, message or ""

    async def send(
        self,
        upstream: UpstreamConfig,
        path: str,
        content: bytes,
        *,
        method: str = "POST",
        accept: str | None = None,
        trace: Mapping[str, str] | None = None,
    ) -> Answer:
        """Send a request and return the open response once its status is final.

        Connect errors, and what is ``retryable`` (429 and 502/503/504 unless the
        dialect says more), are retried ``max_retries`` times honouring
        ``Retry-After`` when the wait it asks for fits ``RETRY_WAIT_BUDGET_S``; a longer
        wait, and other statuses, are returned as they are (a 429 reaches the client
        with the upstream's ``Retry-After``). The caller reads or
        streams the body and closes the response. ``trace`` (W3C ``traceparent``) goes
        along unless the upstream's ``trace_context`` is off.
        """
        headers, timeout = self._prepare(upstream)
        if accept is not None:
            headers = {**headers, "accept": accept}
        if trace and upstream.trace_context:
            headers = {**headers, **trace}
        url = self._url(upstream, path)
        for attempt in range(upstream.max_retries + 1):
            last = attempt == upstream.max_retries
            started = time.perf_counter()
            sent: Mapping[str, str] = headers
            if self._sign is not None:  # each attempt signed anew (its time is in it)
                sent = await self._sign(upstream, method, url, headers, content)
            try:
                with upstream_errors(upstream.name, "send"):
                    response = await self._wire.send(method, url, sent, content, timeout)
            except UpstreamTimeout:
                self._observe(upstream, "timeout", started)
                raise
            except UpstreamError as exc:
                self._observe(upstream, "error", started)
                self.trouble[upstream.name] = "unreachable"
                if last:
                    logger.warning(
                        "upstream %s unreachable at %s: %s (`toolgate check --probe` tries it)",
                        upstream.name,
                        upstream.base_url,
                        type(exc.__cause__).__name__,
                        extra={
                            FIELDS: {
                                "upstream": upstream.name,
                                "base_url": upstream.base_url,
                                "status": "unreachable",
                            }
                        },
                    )
                    raise
                await asyncio.sleep(backoff_delay(attempt, {}, self._backoff_base_s))
                continue
            self._observe(upstream, status_class(response.status_code), started)
            if response.status_code == 503:
                if self.trouble.get(upstream.name) != "loading":
                    self.trouble[upstream.name] = "unavailable"
            elif self.trouble:
                self.trouble.pop(upstream.name, None)
            if last or not self._retryable(response.status_code, response.headers):
                return response
            asked = retry_after_s(response.headers)
            if asked is not None and asked > RETRY_WAIT_BUDGET_S:
                return response  # the client hears the wait at once, not after it
            await response.aclose()
            await asyncio.sleep(backoff_delay(attempt, response.headers, self._backoff_base_s))
        raise AssertionError("unreachable")  # pragma: no cover

    def _observe(self, upstream: UpstreamConfig, status: str, started: float) -> None:
        if self._metrics is not None:
            self._metrics.upstream_calls.labels(upstream.name, status).inc()
            elapsed = time.perf_counter() - started
            self._metrics.upstream_seconds.labels(upstream.name).observe(elapsed)
