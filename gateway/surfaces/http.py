"""HTTP plumbing shared by the routes: request ids, bounded body reads, error responses."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import SecretStr
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Message

from gateway.config import Record, ServerConfig
from gateway.digits import whole
from gateway.engine.recorded import LoopStart
from gateway.errors import (
    BodyTimeout,
    ClientClosedRequest,
    GatewayError,
    PayloadTooLarge,
    StoreUnavailable,
    settle,
)
from gateway.ops.log_context import serving
from gateway.ops.metrics import NONE
from gateway.policy.identity import owner_of
from gateway.policy.large_bodies import LargeBodies
from gateway.surfaces.event_stream import EventStreamResponse
from gateway.values import UsageCounts
from tool_registry import dumps

if TYPE_CHECKING:
    from gateway.engine.report import RunReport
    from gateway.ops.spans import RequestSpan

logger = logging.getLogger("gateway")


WATCH_AFTER_S = 0.05  # a request answered sooner never starts a watcher


class DisconnectWatch:
    """Cancels a request's handler when its body is late or its client goes away.

    One timer serves the request (a timer costs a few microseconds to make and cancel).
    It first fires at the sooner of ``server.body_timeout_s`` and ``WATCH_AFTER_S``
    after the body began to be read. If the body is not all in by then, it waits for
    the body's deadline: past it, the handler's task is cancelled and the request
    answered 408. Once the body is in (``arm``; ``receive`` then only reports the
    disconnect), a request answered before the timer fires costs nothing more; a longer
    one gets a task that waits for the disconnect and cancels the handler's task, so a
    client that leaves stops the upstream call and running tools before any answer
    exists (noticed at most ``WATCH_AFTER_S`` late). Stopped when the handler has its
    answer; an event stream watches for itself from there.
    """

    __slots__ = (
        "_body_due",
        "_handler",
        "_request",
        "_timer",
        "_waiting",
        "body_timeout_s",
        "cancelled",
        "gone",
        "late",
    )

    def __init__(self) -> None:
        self._handler: asyncio.Task[Any] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._waiting: asyncio.Task[Message] | None = None
        self._request: Request | None = None  # set once the body is in
        self._body_due: float | None = None  # the body's deadline, once waited for alone
        self.gone = False  # the client left
        self.late = False  # the body did not arrive within body_timeout_s
        self.body_timeout_s = 0.0
        self.cancelled = False  # the handler's task was cancelled for one of these

    def expect_body(self, timeout_s: float) -> None:
        self.body_timeout_s = timeout_s
        self._handler = asyncio.current_task()
        loop = asyncio.get_running_loop()
        if timeout_s > WATCH_AFTER_S:
            self._body_due = loop.time() + timeout_s
            self._timer = loop.call_later(WATCH_AFTER_S, self._fired)
        else:
            self._timer = loop.call_later(timeout_s, self._fired)

    def _fired(self) -> None:
        self._timer = None
        request = self._request
        if request is not None:  # the body is in, and the answer is not yet
            self._watch(request)
            return
        due, self._body_due = self._body_due, None
        if due is not None:  # the body still comes: its own deadline from here
            self._timer = asyncio.get_running_loop().call_at(due, self._fired)
            return
        self.late = True
        self._cancel_handler()

    def _cancel_handler(self) -> None:
        handler = self._handler
        if handler is not None and not handler.done() and not self.cancelled:
            handler.cancel()
            self.cancelled = True

    def arm(self, request: Request) -> None:
        """The body is in: from now on, watch for the client leaving."""
        self._request = request
        if self._handler is None:
            self._handler = asyncio.current_task()
        if self._timer is not None and self._body_due is not None:
            return  # its first firing is still to come: the watch starts then
        if self._timer is not None:  # it waits for the body's deadline: no longer
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(WATCH_AFTER_S, self._fired)

    def _watch(self, request: Request) -> None:
        self._timer = None
        self._waiting = asyncio.ensure_future(request.receive())
        self._waiting.add_done_callback(self._received)

    @staticmethod
    def _left(task: asyncio.Task[Message]) -> bool:
        if task.cancelled():
            return False
        return task.exception() is not None or task.result().get("type") == "http.disconnect"

    def _received(self, task: asyncio.Task[Message]) -> None:
        if self._waiting is not task or not self._left(task):
            return
        self.gone = True
        self._cancel_handler()

    def stop(self) -> None:
        """Called by the handler's task once it has its answer (or its error)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._request = None  # nothing more to watch it for
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            if waiting.done():
                self.gone = self.gone or self._left(waiting)
            else:
                waiting.cancel()
        if self.cancelled and self._handler is not None:
            # Ours was swallowed on the way (the handler returned or raised another error).
            self.cancelled = False
            self._handler.uncancel()


@dataclass(slots=True)
class Exchange:
    """One request as the routes see it: its id, the headers its response will carry
    whatever it turns out to be (an answer, an error, a stream), and what the end of
    the request reports (metrics, the log line, the trace)."""

    request_id: str
    headers: dict[str, str] = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)
    wall_start: float = field(default_factory=time.time)
    tenant: str = NONE
    identity: str = ""  # who within the tenant (``identity.caller_identity``), once admitted
    user: str | None = None  # the verified end user, when the tenant verifies them
    user_token: str | None = None  # the token that verified them (never shown anywhere)
    model: str = NONE
    report: RunReport | None = None  # how a request's run ended, when it ran the loop
    usage: UsageCounts | None = None  # the usage of a pass-through answer, when read
    cost_nanos: int | None = None  # what a pass-through answer cost, when priced
    first_byte: float | None = None
    error: str | None = None
    disconnect: DisconnectWatch = field(default_factory=DisconnectWatch)
    release: Callable[[], None] | None = None  # gives back a large body's share, once answered
    span: RequestSpan | None = None  # the request's span, when tracing is on
    route: str = ""  # the route's path template
    record: Record = "off"  # its tenant's recording mode, once admitted
    # The request body's bytes as the client sent them, kept when it may be recorded:
    # a surface's own dicts change as it works (a restored turn, dropped tools).
    sent: bytes | None = None
    loop_start: LoopStart | None = None  # where the loop began, likewise

    @property
    def owner(self) -> str | None:
        """Who alone may read what the request keeps of its run (``owner_of``)."""
        return owner_of(self.identity, self.user)


Handler = Callable[[Request, Exchange], Awaitable[Response]]


class Observing(Protocol):
    def begin(self, request: Request, exchange: Exchange, route: str) -> None: ...

    def abandon(self, exchange: Exchange) -> None: ...

    async def finish(self, exchange: Exchange, status: int) -> None: ...


def new_request_id() -> str:
    return f"req_{os.urandom(16).hex()}"  # secrets.token_hex(16), without its two calls


def _too_large(limit: int) -> PayloadTooLarge:
    # The rest of the body may still come: the connection ends with the answer.
    message = f"The request body is larger than {limit} bytes."
    return PayloadTooLarge(message, headers={"connection": "close"})


async def read_body(
    request: Request, exchange: Exchange, server: ServerConfig, bodies: LargeBodies
) -> bytes:
    """The request body, refused with 413 as soon as it is known to pass
    ``server.max_body_bytes`` and with 408 if it has not all come within
    ``server.body_timeout_s``; a large one is held against
    ``server.large_bodies_held_bytes`` until the request is answered (503 past it).
    From then on, the client leaving cancels the request (``DisconnectWatch``)."""
    limit = server.max_body_bytes
    declared = request.headers.get("content-length")
    size = whole(declared)
    if size is not None and size > limit:
        raise _too_large(limit)
    watch = exchange.disconnect
    watch.expect_body(server.body_timeout_s)
    chunks = []
    size = 0
    more = True
    while more:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
        more = message.get("more_body", False)
    if size > server.large_body_bytes:
        exchange.release = bodies.hold(size, server.large_bodies_held_bytes)
    watch.arm(request)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def bearer_digest(request: Request) -> bytes | None:
    """The SHA-256 of the request's ``Authorization: Bearer`` key (None: it sent none),
    to compare with configured keys in constant time (``is_key``)."""
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        return None
    return hashlib.sha256(key.encode()).digest()


def is_key(presented: bytes, secret: SecretStr | None) -> bool:
    """Whether a presented key's digest is ``secret``'s, in constant time."""
    if secret is None:
        return False
    expected = hashlib.sha256(secret.get_secret_value().encode()).digest()
    return hmac.compare_digest(presented, expected)


def json_response(
    content: Any, status_code: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(dumps(content), status_code, headers, media_type="application/json")


def error_response(exc: GatewayError, request_id: str) -> Response:
    headers = {**exc.headers, "x-request-id": request_id}
    return json_response(exc.envelope(), exc.status, headers)


# How the boundary renders an error for a route: OpenAI's envelope (``error_response``),
# or a page of the route's own (the connect pages, the console).
Render = Callable[[Request, GatewayError, str], Response]


def envelope(request: Request, exc: GatewayError, request_id: str) -> Response:
    """The boundary's rendering of an error for the API routes: OpenAI's envelope."""
    return error_response(exc, request_id)


BOUNDARY = "__toolgate_boundary__"  # set on every function ``endpoint`` makes


def page_words(exc: GatewayError, request_id: str) -> tuple[str, str]:
    """The title and text of a page that answers ``exc`` (the connect pages', the
    console's): a store that does not answer, a failure of the gateway's (named by the
    request id, never a traceback), or the error's own words."""
    if isinstance(exc, StoreUnavailable):
        return "Unavailable", "The gateway's store does not answer now: try again shortly."
    if exc.status >= 500:
        return (
            "Something went wrong",
            f"The gateway failed to answer (request {request_id}): try again later.",
        )
    return "This page cannot be shown", exc.message


def page_headers(exc: GatewayError) -> dict[str, str]:
    """What a page that answers ``exc`` says beside it: its own headers, and when to try
    again where the store does not answer."""
    retry = {"retry-after": "5"} if isinstance(exc, StoreUnavailable) else {}
    return retry | exc.headers


async def _respond(
    handler: Handler, request: Request, exchange: Exchange, render: Render = envelope
) -> Response:
    """The handler's answer, or ``render`` of what it raised."""
    watch = exchange.disconnect
    response: Response | None = None
    try:
        response = await handler(request, exchange)
    except asyncio.CancelledError:
        if not watch.cancelled:
            raise  # cancelled from outside (shutdown): not ours to stop
        watch.cancelled = False
        task = asyncio.current_task()
        if task is not None and task.uncancel() > 0:
            raise  # cancelled from outside as well
        if watch.late:  # the rest of the body may still come: the connection ends here
            late = BodyTimeout(
                f"The request body did not arrive within {watch.body_timeout_s:g}s.",
                headers={"connection": "close"},
            )
            response = render(request, late, exchange.request_id)
            exchange.error = late.code
    except GatewayError as exc:
        response = render(request, exc, exchange.request_id)
        exchange.error = exc.code or exc.type
        settle(exc)  # answered: from here a value (its traceback held the request)
    except ClientDisconnect as exc:
        watch.gone = True
        settle(exc)
    except Exception as exc:
        logger.exception("unhandled error in request %s", exchange.request_id)
        error = GatewayError(f"The gateway failed to handle request {exchange.request_id}.")
        response = render(request, error, exchange.request_id)
        settle(exc)
    finally:
        watch.stop()
    if watch.gone or response is None:
        if isinstance(response, EventStreamResponse):
            await response.discard()  # the client left as its stream was about to start
        # Nobody reads this answer; it is what the request's metrics and log line say.
        gone = ClientClosedRequest("The client closed the connection.")
        exchange.error = gone.code
        return error_response(gone, exchange.request_id)
    return response


def _add_headers(response: Response, exchange: Exchange) -> None:
    """The exchange's headers on its answer, where the answer has none of that name,
    and its request id: on the raw header list, not through ``MutableHeaders`` (whose
    every lookup and set walks the list again)."""
    raw = [(k, v) for k, v in response.raw_headers if k != b"x-request-id"]
    if exchange.headers:
        present = {k for k, _ in raw}
        for name, value in exchange.headers.items():
            key = name.lower().encode("latin-1")
            if key not in present:
                raw.append((key, value.encode("latin-1")))
    raw.append((b"x-request-id", exchange.request_id.encode("latin-1")))
    response.raw_headers[:] = raw  # in place: a MutableHeaders made of it stays its view


def endpoint(
    handler: Handler,
    observer: Observing | None = None,
    route: str = "",
    render: Render = envelope,
) -> Callable[[Request], Awaitable[Response]]:
    """Give a handler a request id, and render what it raises as OpenAI's error envelope
    (or ``render``'s page). An ``observer`` sees the request begin and end (``route``:
    its path template).

    This is the boundary, and every route the gateway serves stands behind it (the
    routes' test holds it): an unexpected exception is logged with its traceback and the
    client gets a 500 that carries the request id, never the traceback; a store that
    does not answer is a 503 saying so.
    """

    async def wrapped(request: Request) -> Response:
        exchange = Exchange(new_request_id())
        serving(exchange)  # this task's log lines are the request's (uvicorn's task each)
        if observer is not None:
            observer.begin(request, exchange, route)
        try:
            response = await _respond(handler, request, exchange, render)
        except BaseException:  # cancelled from outside: no answer, but the request is over
            if exchange.release is not None:
                exchange.release()
            if observer is not None:
                observer.abandon(exchange)
            raise
        _add_headers(response, exchange)
        if isinstance(response, EventStreamResponse):
            if exchange.first_byte is None:
                exchange.first_byte = time.perf_counter()
            response.on_close = partial(_stream_over, observer, exchange, response)
            return response
        if observer is not None:
            await observer.finish(exchange, response.status_code)
        if exchange.release is not None:
            exchange.release()  # its body is rendered, the request's objects gone
        return response

    setattr(wrapped, BOUNDARY, True)
    return wrapped


async def _stream_over(
    observer: Observing | None, exchange: Exchange, response: EventStreamResponse
) -> None:
    """A stream ended: sent whole, or cut short by a client that left (the Stop button
    of a chat UI), which is what its metrics, log line and trace then say (499); a
    large body's share goes back."""
    try:
        if observer is None:
            return
        if response.completed:
            await observer.finish(exchange, response.status_code)
            return
        exchange.error = exchange.error or ClientClosedRequest.default_code
        await observer.finish(exchange, ClientClosedRequest.status)
    finally:
        if exchange.release is not None:
            exchange.release()
