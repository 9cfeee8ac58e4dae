"""The floor: the smallest correct starlette + httpx (aiohttp transport) pass-through,
and the same proxy making one tool round by hand (``/v1/floor/tool-round``: ask, call
the one tool the answer names, ask again), the floor of a tool round's HTTP work.

uvicorn bench.baseline_proxy:app --port 9003
    (UPSTREAM=http://127.0.0.1:9001 TOOLS=http://127.0.0.1:9002)
"""

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from httpx_aiohttp import AiohttpTransport
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

UPSTREAM = os.environ.get("UPSTREAM", "http://127.0.0.1:9001")
TOOLS = os.environ.get("TOOLS", "http://127.0.0.1:9002")


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    limits = httpx.Limits(max_connections=1000)
    async with httpx.AsyncClient(transport=AiohttpTransport(limits=limits)) as client:
        app.state.client = client
        yield


async def chat(request: Request) -> Response:
    client: httpx.AsyncClient = request.app.state.client
    upstream = client.build_request(
        "POST",
        f"{UPSTREAM}/v1/chat/completions",
        content=await request.body(),
        headers={"content-type": "application/json"},
    )
    response = await client.send(upstream, stream=True)
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return StreamingResponse(response.aiter_raw(), media_type="text/event-stream")
    body = await response.aread()
    return Response(body, response.status_code, media_type="application/json")


async def tool_round(request: Request) -> Response:
    client: httpx.AsyncClient = request.app.state.client
    headers = {"content-type": "application/json"}
    body = json.loads(await request.body())
    url = f"{UPSTREAM}/v1/chat/completions"
    first = (await client.post(url, content=json.dumps(body), headers=headers)).json()
    message = first["choices"][0]["message"]
    result = await client.get(f"{TOOLS}/tool?ms=0")
    answer = {
        "role": "tool",
        "tool_call_id": message["tool_calls"][0]["id"],
        "content": result.text,
    }
    body["messages"] += [message, answer]
    second = await client.post(
        url, content=json.dumps(body, separators=(",", ":")), headers=headers
    )
    return Response(second.content, second.status_code, media_type="application/json")


app = Starlette(
    routes=[
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/floor/tool-round", tool_round, methods=["POST"]),
    ],
    lifespan=lifespan,
)
