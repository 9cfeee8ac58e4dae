"""HTTP plumbing shared by the routes: request ids, bounded body reads, error responses."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from tool_registry.jsonio import dumps

from .errors import BadRequest, GatewayError, PayloadTooLarge
from .event_stream import EventStreamResponse
from .metrics import NONE

logger = logging.getLogger("gateway")


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


Handler = Callable[[Request, Exchange], Awaitable[Response]]


class Observing(Protocol):
    def begin(self) -> None: ...

    def abandon(self) -> None: ...

    async def finish(self, exchange: Exchange, status: int) -> None: ...


def new_request_id() -> str:
    return f"req_{uuid.uuid4().hex}"


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it is known to pass ``limit``."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"The request body is larger than {limit} bytes.")
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"The request body is larger than {limit} bytes.")
        chunks.append(chunk)
    return b"".join(chunks)


def json_response(
    content: Any, status_code: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(dumps(content), status_code, headers, media_type="application/json")


def error_response(exc: GatewayError, request_id: str) -> Response:
    headers = {**exc.headers, "x-request-id": request_id}
    return json_response(exc.envelope(), exc.status, headers)


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
            response = await handler(request, exchange)
        except GatewayError as exc:
            exchange.error = exc.code or exc.type
            response = error_response(exc, exchange.request_id)
        except ClientDisconnect:
            # The client left while its body was being read: nobody reads this answer.
            response = error_response(BadRequest("The client disconnected."), exchange.request_id)
        except Exception:
            logger.exception("unhandled error in request %s", exchange.request_id)
            error = GatewayError(f"The gateway failed to handle request {exchange.request_id}.")
            response = error_response(error, exchange.request_id)
        except BaseException:  # cancelled: no answer, but the request is over
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
