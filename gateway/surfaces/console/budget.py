"""The console's page budget (docs/operations.md#the-operator-console): pages (and
sign-in attempts) per browser address, live updates per signed-in session apart from
them; a refusal says what was too much and when to come back. Its stylesheet and
script are never counted (``assets.py``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

from starlette.requests import Request

if TYPE_CHECKING:
    from gateway.runtime.services import Gateway

POLL_HEADER = "hx-request"  # htmx asks again with it: a live update


class Refusal(NamedTuple):
    text: str  # what was too much, and when to come back
    seconds: int  # its Retry-After


def address(request: Request) -> str:
    return request.client.host if request.client is not None else ""


def is_poll(request: Request) -> bool:
    return request.headers.get(POLL_HEADER) == "true"


async def page_refusal(gateway: Gateway, request: Request) -> Refusal | None:
    """Why a page is refused for the address's budget (with when to come back), or None."""
    per_minute = gateway.runtime.config.console.pages_per_minute
    wait = await gateway.limiter.admit_browser(address(request) or "-", per_minute, "console")
    return None if wait is None else _words(f"more than {per_minute} console pages", wait)


async def poll_refusal(gateway: Gateway, session_token: str) -> Refusal | None:
    """Why a signed-in session's live update is refused for its budget, or None."""
    per_minute = gateway.runtime.config.console.polls_per_minute
    wait = await gateway.limiter.admit_browser(
        "session:" + session_token, per_minute, "console-poll"
    )
    return None if wait is None else _words(f"more than {per_minute} live updates", wait)


def _words(what: str, wait: float) -> Refusal:
    seconds = max(1, math.ceil(wait))
    text = f"This browser asked for {what} within a minute. Wait {seconds} s, then reload the page."
    return Refusal(text, seconds)
