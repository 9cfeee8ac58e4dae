"""Retry decisions for HTTP calls (pure functions, shared by tools and upstreams), and
the backoff of sources retried in the background."""

from __future__ import annotations

import asyncio
import email.utils
import math
import time
from collections.abc import Mapping

RETRY_STATUSES: frozenset[int] = frozenset({429, 502, 503, 504})


def should_retry(status: int, headers: Mapping[str, str]) -> bool:
    """Whether a response with this status is worth another attempt.

    An explicit ``x-should-retry`` header from the server wins.
    """
    explicit = headers.get("x-should-retry")
    if explicit == "true":
        return True
    if explicit == "false":
        return False
    return status in RETRY_STATUSES


def retry_after_s(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """The wait a server asked for, from ``retry-after-ms`` or ``retry-after``."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        asked = _seconds(millis)
        if asked is not None:
            return asked / 1000
    value = headers.get("retry-after")
    if value is None:
        return None
    asked = _seconds(value)
    if asked is not None:
        return asked
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    seconds: float = when.timestamp() - (time.time() if now is None else now)
    return max(seconds, 0.0)


def _seconds(text: str) -> float | None:
    """A number of seconds a far side wrote (``nan`` and ``inf`` are not), from 0."""
    try:
        value = float(text)
    except ValueError:
        return None
    return max(value, 0.0) if math.isfinite(value) else None


def backoff_delay(
    attempt: int, headers: Mapping[str, str], base_s: float = 0.25, cap_s: float = 8.0
) -> float:
    """Seconds to wait before retry number ``attempt`` (0-based), honouring Retry-After."""
    asked = retry_after_s(headers)
    if asked is not None:
        return min(asked, cap_s)
    return min(base_s * 2.0**attempt, cap_s)


class Backoff:
    """Waits between attempts that double from ``first_s`` up to ``cap_s``; ``reset``
    after a success starts again from ``first_s``."""

    def __init__(self, first_s: float = 1.0, cap_s: float = 60.0) -> None:
        self.first_s = first_s
        self.cap_s = cap_s
        self.delay = first_s  # the next wait

    def reset(self) -> None:
        self.delay = self.first_s

    async def wait(self) -> None:
        delay, self.delay = self.delay, min(self.delay * 2, self.cap_s)
        await asyncio.sleep(delay)
