"""Requests with no server tools in play: forwarded with as little work as possible."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
from starlette.responses import Response

from tool_registry.jsonio import dumps, loads

from .event_stream import STREAM_HEADERS, EventStreamResponse, close_quietly
from .models import Route
from .sse import SSEParser, encode
from .upstream import UpstreamClient, map_status_error, read_all


async def _stream(response: httpx.Response) -> AsyncIterator[bytes]:
    """Upstream bytes as they come: no parsing, no buffering."""
    try:
        async for chunk in response.aiter_raw():
            yield chunk
    finally:
        await close_quietly(response)


async def _renamed_stream(response: httpx.Response, model: str) -> AsyncIterator[bytes]:
    """Upstream events with the client's model name put back: parsed, so only used when
    the model is renamed."""
    parser = SSEParser()
    try:
        async for chunk in response.aiter_raw():
            for data in parser.feed(chunk):
                yield _rename_event(data, model)
        for data in parser.close():
            yield _rename_event(data, model)
    finally:
        await close_quietly(response)


def _rename_event(data: str, model: str) -> bytes:
    try:
        event = loads(data)
    except ValueError:
        event = None
    if isinstance(event, dict) and "model" in event:
        event["model"] = model
        return encode(event)
    return b"data: " + data.encode() + b"\n\n"


async def forward_json(
    client: UpstreamClient,
    route: Route,
    path: str,
    raw: bytes,
    body: dict[str, Any],
    changed: bool,
    client_model: str,
    headers: dict[str, str],
    stream: bool = False,
) -> Response:
    """Send a JSON request to the model's upstream and pass its answer back.

    The body is re-encoded only when the gateway changed it (a renamed model, a removed
    ``toolgate`` field); the answer is re-encoded only to restore a renamed model's name.
    """
    renamed = route.model.target != client_model
    if renamed or changed:
        body["model"] = route.model.target
        raw = dumps(body)
    response = await client.send(
        route.upstream, path, raw, accept="text/event-stream" if stream else None
    )
    if response.status_code >= 300:
        data = await read_all(route.upstream, response)
        raise map_status_error(route.upstream.name, response, data)
    if stream:
        body_stream = _renamed_stream(response, client_model) if renamed else _stream(response)
        return EventStreamResponse(body_stream, headers={**STREAM_HEADERS, **headers})
    media_type = response.headers.get("content-type", "application/json")
    data = await read_all(route.upstream, response)
    if renamed:
        try:
            parsed = loads(data)
        except ValueError:
            parsed = None  # not ours to judge: passed on as it came
        if isinstance(parsed, dict) and "model" in parsed:
            parsed["model"] = client_model
            data = dumps(parsed)
    return Response(data, status_code=response.status_code, media_type=media_type, headers=headers)
