"""HTTP plumbing shared by the routes: request ids, bounded body reads, error responses."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

import anyio
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Message

from tool_registry.jsonio import dumps

from .errors import BodyTimeout, ClientClosedRequest, GatewayError, PayloadTooLarge
from .event_stream import EventStreamResponse
from .metrics import NONE

logger = logging.getLogger("gateway")


class DisconnectWatch:
    """Cancels a request's work when its client goes away.

    Armed once the body is read (``receive`` then only reports the disconnect): a task
    waits for that message and cancels the scope the handler runs in, so a client that
    leaves stops the upstream call and running tools before any answer exists. Stopped
    when the handler has its answer; an event stream watches for itself from there.
    """

    __slots__ = ("_task", "gone", "scope")

    def __init__(self) -> None:
        self.scope: anyio.CancelScope | None = None
        self._task: asyncio.Task[Message] | None = None
        self.gone = False

    def arm(self, request: Request) -> None:
        if self._task is None and self.scope is not None:
            self._task = asyncio.ensure_future(request.receive())
            self._task.add_done_callback(self._received)

    def _received(self, task: asyncio.Task[Message]) -> None:
        if task.cancelled():
            return
        if task.exception() is not None or task.result().get("type") == "http.disconnect":
            self.gone = True
            if self.scope is not None:
                self.scope.cancel()

    def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        if task.done():
            self._received(task)
        else:
            task.cancel()


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
    model: str = NONE
    session: Any = None  # the LoopSession of a request with server tools in play
    usage: Any = None  # the usage of a pass-through answer, when read
    first_byte: float | None = None
    error: str | None = None
    disconnect: DisconnectWatch = field(default_factory=DisconnectWatch)


Handler = Callable[[Request, Exchange], Awaitable[Response]]


class Observing(Protocol):
    def begin(self) -> None: ...

    def abandon(self) -> None: ...

    async def finish(self, exchange: Exchange, status: int) -> None: ...


def new_request_id() -> str:
    return f"req_{uuid.uuid4().hex}"


async def read_body(request: Request, exchange: Exchange, limit: int, timeout_s: float) -> bytes:
    """The request body, refused with 413 as soon as it is known to pass ``limit`` and
    with 408 if it has not all come within ``timeout_s``. From then on, the client
    leaving cancels the request (``DisconnectWatch``)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"The request body is larger than {limit} bytes.")
    chunks = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise PayloadTooLarge(f"The request body is larger than {limit} bytes.")
                chunks.append(chunk)
    except TimeoutError as exc:
        raise BodyTimeout(f"The request body did not arrive within {timeout_s:g}s.") from exc
    exchange.disconnect.arm(request)
    return b"".join(chunks)


def json_response(
    content: Any, status_code: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(dumps(content), status_code, headers, media_type="application/json")


def error_response(exc: GatewayError, request_id: str) -> Response:
    headers = {**exc.headers, "x-request-id": request_id}
    return json_response(exc.envelope(), exc.status, headers)


async def _respond(handler: Handler, request: Request, exchange: Exchange) -> Response:
    """The handler's answer, or the error envelope of what it raised."""
    watch = exchange.disconnect
    response: Response | None = None
    with anyio.CancelScope() as watch.scope:
        try:
            response = await handler(request, exchange)
        except GatewayError as exc:
            response = error_response(exc, exchange.request_id)
            exchange.error = exc.code or exc.type
        except ClientDisconnect:
            watch.gone = True
        except Exception:
            logger.exception("unhandled error in request %s", exchange.request_id)
            error = GatewayError(f"The gateway failed to handle request {exchange.request_id}.")
            response = error_response(error, exchange.request_id)
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


def endpoint(
    handler: Handler, observer: Observing | None = None
) -> Callable[[Request], Awaitable[Response]]:
    """Give a handler a request id, and render what it raises as OpenAI's error envelope.

    This is the boundary: an unexpected exception is logged with its traceback and the
    client gets a 500 that carries the request id, never the traceback.
    """

    async def wrapped(request: Request) -> Response:
        exchange = Exchange(new_request_id())
        if observer is not None:
            observer.begin()
        try:
            response = await _respond(handler, request, exchange)
        except BaseException:  # cancelled from outside: no answer, but the request is over
            if observer is not None:
                observer.abandon()
            raise
        headers = response.headers
        for name, value in exchange.headers.items():
            if name not in headers:
                headers[name] = value
        headers["x-request-id"] = exchange.request_id
        if observer is not None:
            if isinstance(response, EventStreamResponse):
                if exchange.first_byte is None:
                    exchange.first_byte = time.perf_counter()
                response.on_close = partial(observer.finish, exchange, response.status_code)
            else:
                await observer.finish(exchange, response.status_code)
        return response

    return wrapped
