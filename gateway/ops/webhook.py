"""Telling an operator an approval waits (docs/design.md §13): ``approvals.webhook`` is
POSTed the pending approval as JSON, through the one guarded transport (docs/design.md §15),
in the background — a slow or failing hook never holds the run (it is logged).

With ``approvals.webhook_secret`` the delivery is signed as Standard Webhooks
(standardwebhooks.com) signs it, which its libraries (``standardwebhooks`` for Python,
Node, Go, …, and Svix's) verify as they are: ``webhook-id``, ``webhook-timestamp``
(Unix seconds) and ``webhook-signature: v1,<base64 HMAC-SHA256>`` of
``"{id}.{timestamp}.{body}"``, keyed with the secret's base64 part (``whsec_…``). A
receiver refuses a timestamp more than five minutes from its clock, which bounds a
replay of a captured delivery; the id lets it drop one it has seen.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx

from gateway.config import webhook_key
from tool_registry import EgressDenied, GuardedTransport, dumps, failure_words, send

logger = logging.getLogger("gateway.approvals")

TIMEOUT_S = 5.0


def signature_headers(key: bytes, body: bytes, message_id: str, timestamp: int) -> dict[str, str]:
    """The Standard Webhooks headers that sign ``body``."""
    signed = b"%s.%d.%s" % (message_id.encode(), timestamp, body)
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": "v1," + base64.b64encode(digest).decode(),
    }


class Webhooks:
    def __init__(self, transport: GuardedTransport, clock: Callable[[], float] = time.time) -> None:
        self._transport = transport
        self._clock = clock
        self._tasks: set[asyncio.Task[None]] = set()

    def post(self, url: str, event: dict[str, Any], secret: str | None = None) -> None:
        """Send ``event`` to ``url`` soon, signed with ``secret`` if given; nothing
        waits for it."""
        task = asyncio.create_task(self.deliver(url, event, secret))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def request(self, url: str, event: dict[str, Any], secret: str | None) -> httpx.Request:
        body = dumps(event)
        headers = {"content-type": "application/json"}
        if secret is not None:
            message_id = f"msg_{uuid.uuid4().hex}"
            timestamp = int(self._clock())
            headers |= signature_headers(webhook_key(secret), body, message_id, timestamp)
        timeout = {"connect": TIMEOUT_S, "read": TIMEOUT_S, "write": TIMEOUT_S, "pool": TIMEOUT_S}
        return httpx.Request(
            "POST", url, content=body, headers=headers, extensions={"timeout": timeout}
        )

    async def deliver(self, url: str, event: dict[str, Any], secret: str | None = None) -> None:
        """Send ``event`` now; failures are logged, never raised."""
        try:
            request = self.request(url, event, secret)
            async with asyncio.timeout(TIMEOUT_S):
                response = await send(self._transport, request)
                await response.aclose()
        except (
            EgressDenied,
            httpx.HTTPError,
            httpx.InvalidURL,
            TimeoutError,
            OSError,
            ValueError,
        ) as exc:
            # The guard's refusal reaches here as it is, or under the transport's error
            # (a network error whose cause it is): said as a refusal either way.
            logger.warning("approval webhook not delivered: %s", failure_words(exc))
            return
        if response.status_code >= 300:
            logger.warning("approval webhook answered HTTP %s", response.status_code)

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
