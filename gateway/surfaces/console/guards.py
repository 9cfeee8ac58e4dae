"""What every console page has (docs/design.md §19): headers that keep it out of frames and
away from any script or host but its own (its one script is the vendored htmx), posts
taken only from its own pages (the browser's ``Sec-Fetch-Site`` and ``Origin``, and a
CSRF token in every form), and small form bodies."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import Response

from gateway.surfaces.http import Exchange, Handler

HEADERS = {
    # The console's own stylesheet and its one vendored script (htmx, pinned by hash),
    # which asks the console's own pages for what changed; nothing inline, no eval.
    "content-security-policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
    "script-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
    # Not no-referrer: under it a browser posts its forms with ``Origin: null``, and
    # the origin is what tells the console's own posts from another site's.
    "referrer-policy": "same-origin",
    "x-content-type-options": "nosniff",
    "cross-origin-opener-policy": "same-origin",
}
MAX_FORM_BYTES = 8 * 1024
MAX_FORM_FIELDS = 64  # the replay form's recordings (50 offered) and its own three


def handler_of(page: Callable[[Request], Awaitable[Response]]) -> Handler:
    """A page as the boundary calls a handler (the exchange is the boundary's)."""

    async def handler(request: Request, exchange: Exchange) -> Response:
        return await page(request)

    return handler


def same_origin(request: Request) -> bool:
    """Whether a post comes from a page of this origin: a browser says where it was
    sent from (``Sec-Fetch-Site``, ``Origin``); one that says another site is refused."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None:  # only where the browser's fetch metadata vouches for it
        return site in ("same-origin", "none")
    host = request.headers.get("host", "")
    return origin in (f"http://{host}", f"https://{host}")


async def form(request: Request) -> dict[str, str] | None:
    """A small urlencoded form's fields (the first value of each), or None when it is
    too large or not a form."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        return None
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return None
    try:
        fields = parse_qs(
            body.decode("utf-8"), keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS
        )
    except (UnicodeDecodeError, ValueError):
        return None
    return {name: values[0] for name, values in fields.items()}


def tokens_match(given: str | None, expected: str | None) -> bool:
    if not given or not expected:
        return False
    return hmac.compare_digest(given.encode(), expected.encode())
