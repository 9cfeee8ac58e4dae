"""The hot routes answered without the router (issue 38): a request for one of the
model surfaces (an exact method and path) goes straight to its endpoint, past
starlette's exception middleware, router, route matching and request-response
wrappers; everything else goes on to the router as before. What those layers did for
these routes the endpoint does itself (``http.endpoint``: errors as OpenAI's envelope,
a 500 for the unexpected), and the redaction middleware still wraps it (DESIGN.md §7)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

Endpoint = Callable[[Request], Awaitable[Response]]
HOT_PATHS = frozenset({"/v1/chat/completions", "/v1/responses"})


def hot_endpoints(routes: Iterable[BaseRoute]) -> dict[tuple[str, str], Endpoint]:
    """The endpoints of the hot routes among ``routes``, by method and path."""
    found: dict[tuple[str, str], Endpoint] = {}
    for route in routes:
        if isinstance(route, Route) and route.path in HOT_PATHS:
            for method in route.methods or ():
                found.setdefault((method, route.path), route.endpoint)
    return found


class HotRoutes:
    """ASGI middleware in front of the router."""

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
                response = await found(Request(scope, receive, send))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
