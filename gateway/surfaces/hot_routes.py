"""The hot routes answered without the router (issue 38): a request for one of the
model surfaces (an exact method and path) goes straight to its endpoint, past
starlette's exception middleware, router, route matching and request-response
wrappers; everything else goes on to the router as before. What those layers did for
these routes the endpoint does itself (``http.endpoint``: errors as OpenAI's envelope,
a 500 for the unexpected), and the redaction middleware still wraps it (docs/design.md §7)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from starlette.datastructures import Headers
from starlette.requests import Request, empty_receive, empty_send
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

Endpoint = Callable[[Request], Awaitable[Response]]
HOT_PATHS = frozenset({"/v1/chat/completions", "/v1/responses", "/v1/messages", "/api/chat"})


def hot_endpoints(routes: Iterable[BaseRoute]) -> dict[tuple[str, str], Endpoint]:
    """The endpoints of the hot routes among ``routes``, by method and path."""
    found: dict[tuple[str, str], Endpoint] = {}
    for route in routes:
        if isinstance(route, Route) and route.path in HOT_PATHS:
            for method in route.methods or ():
                found.setdefault((method, route.path), route.endpoint)
    return found


class _Headers(Headers):
    """starlette's request headers, looked up in a dict made once: a request's head
    asks for a dozen names, most of them absent, and each of starlette's lookups walks
    the list and raises ``KeyError`` for an absent one. The first value of a name wins,
    as in starlette; ``getlist`` and the rest are starlette's own. Made from the ASGI
    scope's own ``headers`` (names lower-case, as the ASGI spec has them)."""

    def __init__(self, scope: Scope) -> None:
        super().__init__(scope=scope)
        # Reversed, so that the first value of a repeated name is the one kept.
        raw = reversed(scope["headers"])
        self._first: dict[str, str] = {k.decode("latin-1"): v.decode("latin-1") for k, v in raw}

    def get(self, key: str, default: Any = None) -> Any:
        return self._first.get(key.lower(), default)

    def __getitem__(self, key: str) -> str:
        return self._first[key.lower()]

    def __contains__(self, key: Any) -> bool:
        return isinstance(key, str) and key.lower() in self._first


class HotRequest(Request):
    """A hot route's request: its headers are ``_Headers``, made with it (a request's
    trip reads them a dozen times)."""

    def __init__(self, scope: Scope, receive: Receive = empty_receive, send: Send = empty_send):
        super().__init__(scope, receive, send)
        self._looked_up = _Headers(scope)

    @property
    def headers(self) -> Headers:
        return self._looked_up


class HotRoutes:
    """ASGI middleware in front of the router (starlette's ``Middleware``)."""

    def __init__(self, app: ASGIApp, endpoints: Mapping[tuple[str, str], Endpoint]) -> None:
        self.app = app
        self._endpoints = endpoints

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path: str = scope["path"]
            root: str = scope.get("root_path", "")
            if root and path.startswith(root):
                path = path[len(root) :]
            found = self._endpoints.get((scope["method"], path))
            if found is not None:
                response = await found(HotRequest(scope, receive, send))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
