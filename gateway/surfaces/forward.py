"""Requests with no server tools in play: forwarded with as little work as possible."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import anyio
from starlette.background import BackgroundTask
from starlette.responses import Response

from gateway.config import UpstreamConfig
from gateway.errors import NotFound, UpstreamError
from gateway.policy.models import ModelRoute
from gateway.surfaces.event_stream import STREAM_HEADERS, EventStreamResponse
from gateway.upstream.exchange import (
    UpstreamClient,
    close_quietly,
    map_status_error,
    read_all,
    sse_data,
    upstream_errors,
)
from gateway.upstream.numbers import believed_usage
from gateway.upstream.sse import encode, error_event
from gateway.upstream.wire import Answer
from gateway.values import UsageCounts
from tool_registry import dumps, loads_object

Meter = Callable[[UsageCounts | None], Awaitable[None]]  # called with the usage of the answer


def _broken(error: UpstreamError) -> bytes:
    """The error event that ends a forwarded stream the upstream broke off."""
    return b"\n\n" + error_event(error.envelope())


async def _stream(upstream: UpstreamConfig, response: Answer) -> AsyncIterator[bytes]:
    """Upstream bytes as they come: no parsing, no buffering."""
    try:
        with upstream_errors(upstream.name, "stream"):
            async for chunk in response.aiter_raw():
                yield chunk
    except UpstreamError as exc:
        yield _broken(exc)
    finally:
        await close_quietly(response)


async def _parsed_stream(
    upstream: UpstreamConfig,
    response: Answer,
    model: str | None,
    meter: Meter | None,
    hide_usage: bool,
    on_usage: Callable[[UsageCounts | None], None] | None,
) -> AsyncIterator[bytes]:
    """Upstream events, parsed: to put the client's model name back (``model``) and to
    read the usage (``meter``), hiding the usage chunk the client did not ask for."""
    usage: UsageCounts | None = None
    events = sse_data(upstream, response)
    try:
        async for data in events:
            event = loads_object(data)
            if event is None:
                yield b"data: " + data.encode() + b"\n\n"
                continue
            if "usage" in event and event["usage"] is not None:
                usage = believed_usage(event["usage"], upstream.name)
                event["usage"] = usage  # what the gateway counts is what the client reads
                if hide_usage and not event.get("choices"):
                    continue
            if model is not None and "model" in event:
                event["model"] = model
            yield encode(event)
    except UpstreamError as exc:
        yield _broken(exc)
    finally:
        await events.aclose()
        if on_usage is not None and usage is not None:
            on_usage(usage)
        if meter is not None and usage is not None:
            with anyio.CancelScope(shield=True):
                await meter(usage)


async def forward_json(
    client: UpstreamClient,
    route: ModelRoute,
    path: str,
    raw: bytes,
    body: Mapping[str, Any],
    changed: bool,
    client_model: str,
    stream: bool = False,
    meter: Meter | None = None,
    on_usage: Callable[[UsageCounts | None], None] | None = None,
    forwarded: bool = False,
    trace: Mapping[str, str] | None = None,
) -> Response:
    """Send a JSON request to the model's upstream and pass its answer back.

    The body is re-encoded only when the gateway changed it (a renamed model, a removed
    ``toolgate`` field, usage asked for to meter it); the answer is parsed only to put
    back a renamed model's name or to read the usage (``on_usage``; of a stream only when
    it is parsed anyway), charged to a metered tenant (``meter``). On a ``forwarded``
    route, an upstream 404 means the upstream lacks the route: a 404 for the client.
    ``trace`` (W3C headers naming the request's span) goes to the upstream.
    """
    renamed = route.model.target != client_model
    hide_usage = False
    if stream and meter is not None:
        options = body.get("stream_options")
        if not (isinstance(options, dict) and options.get("include_usage") is True):
            kept = options if isinstance(options, dict) else {}
            body = {**body, "stream_options": {**kept, "include_usage": True}}
            hide_usage = changed = True
    if renamed or changed:
        raw = dumps({**body, "model": route.model.target})
    response = await client.send(
        route.upstream, path, raw, accept="text/event-stream" if stream else None, trace=trace
    )
    if response.status_code >= 300:
        data = await read_all(route.upstream, response)
        if forwarded and response.status_code == 404:
            raise NotFound(f"The model's upstream does not serve /v1{path}.")
        raise map_status_error(route.upstream.name, response, data)
    if stream:
        if renamed or meter is not None:
            model = client_model if renamed else None
            events = _parsed_stream(route.upstream, response, model, meter, hide_usage, on_usage)
        else:
            events = _stream(route.upstream, response)
        return EventStreamResponse(events, headers=STREAM_HEADERS)
    media_type = response.headers.get("content-type", "application/json")
    data = await read_all(route.upstream, response)
    background = None
    parsed = loads_object(data) if renamed or meter or on_usage else None
    if parsed is not None:
        if renamed and "model" in parsed:
            parsed["model"] = client_model
            data = dumps(parsed)
        said = parsed.get("usage")
        usage = believed_usage(said, route.upstream.name)
        if said is not None and dumps(usage) != dumps(said):  # 0.0 == 0, but not as JSON
            # what the gateway counts is what the client reads
            parsed["usage"] = usage
            data = dumps(parsed)
        if on_usage is not None:
            on_usage(usage)
        if meter is not None:
            background = BackgroundTask(meter, usage)
    return Response(data, response.status_code, media_type=media_type, background=background)
