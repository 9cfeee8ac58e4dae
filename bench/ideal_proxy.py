"""What Python can do here: a pass-through written as raw ASGI over one aiohttp session
(no framework, no httpx), and the same proxy making one tool round by hand
(``/v1/floor/tool-round``: ask, call the one tool the answer names, ask again), with
orjson. Nothing else: no auth, no limits, no checks. The bench's ceiling, as the
starlette + httpx proxy (``baseline_proxy``) is its "obvious code" yardstick.

uvicorn bench.ideal_proxy:app --port 9004
    (UPSTREAM=http://127.0.0.1:9001 TOOLS=http://127.0.0.1:9002)
"""

from __future__ import annotations

import os
from typing import Any

import aiohttp
import orjson

UPSTREAM = os.environ.get("UPSTREAM", "http://127.0.0.1:9001") + "/v1/chat/completions"
TOOLS = os.environ.get("TOOLS", "http://127.0.0.1:9002") + "/tool?ms=0"
JSON = [(b"content-type", b"application/json")]
STREAM = [(b"content-type", b"text/event-stream")]
SENT = {"content-type": "application/json"}

Scope = dict[str, Any]


class Ideal:
    def __init__(self) -> None:
        self.session: aiohttp.ClientSession | None = None

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        if scope["path"] == "/v1/floor/tool-round":
            await self._tool_round(body, send)
        else:
            await self._pass(body, send)

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                connector = aiohttp.TCPConnector(limit=1000)
                self.session = aiohttp.ClientSession(connector=connector)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.session is not None:
                    await self.session.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _pass(self, body: bytes, send: Any) -> None:
        assert self.session is not None
        async with self.session.post(UPSTREAM, data=body, headers=SENT) as response:
            if response.content_type == "text/event-stream":
                await send({"type": "http.response.start", "status": 200, "headers": STREAM})
                async for chunk in response.content.iter_any():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
                return
            data = await response.read()
            await send({"type": "http.response.start", "status": response.status, "headers": JSON})
            await send({"type": "http.response.body", "body": data})

    async def _tool_round(self, body: bytes, send: Any) -> None:
        assert self.session is not None
        asked = orjson.loads(body)
        async with self.session.post(UPSTREAM, data=body, headers=SENT) as response:
            first = orjson.loads(await response.read())
        message = first["choices"][0]["message"]
        async with self.session.get(TOOLS) as response:
            result = await response.text()
        answer = {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": result}
        asked["messages"] += [message, answer]
        async with self.session.post(UPSTREAM, data=orjson.dumps(asked), headers=SENT) as response:
            data = await response.read()
            status = response.status
        await send({"type": "http.response.start", "status": status, "headers": JSON})
        await send({"type": "http.response.body", "body": data})


app = Ideal()
