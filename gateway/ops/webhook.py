"""Telling an operator an approval waits (DESIGN.md §13): ``approvals.webhook`` is
POSTed the pending approval as JSON, through the tools' transport and egress guard,
in the background — a slow or failing hook never holds the run (it is logged)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx

from tool_registry import dumps, send

logger = logging.getLogger("gateway.approvals")

TIMEOUT_S = 5.0


class Webhooks:
    def __init__(self, transport: httpx.AsyncBaseTransport) -> None:
        self._transport = transport
        self._tasks: set[asyncio.Task[None]] = set()

    def post(self, url: str, event: dict[str, Any]) -> None:
        """Send ``event`` to ``url`` soon; nothing waits for it."""
        task = asyncio.create_task(self._post(url, event))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _post(self, url: str, event: dict[str, Any]) -> None:
        request = httpx.Request(
            "POST",
            url,
            content=dumps(event),
            headers={"content-type": "application/json"},
            extensions={
                "timeout": {
                    "connect": TIMEOUT_S,
                    "read": TIMEOUT_S,
                    "write": TIMEOUT_S,
                    "pool": TIMEOUT_S,
                }
            },
        )
        try:
            async with asyncio.timeout(TIMEOUT_S):
                response = await send(self._transport, request)
                await response.aclose()
        except (httpx.HTTPError, TimeoutError, OSError) as exc:
            logger.warning("approval webhook not delivered: %s", type(exc).__name__)
            return
        if response.status_code >= 300:
            logger.warning("approval webhook answered HTTP %s", response.status_code)

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
