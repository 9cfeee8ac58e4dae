"""The hot routes skip the router for an exact method and path only: anything else (a
GET of the same path, a trailing slash, another path) is the router's, as before; a
root path is taken off first, as the router does. Their requests' headers answer
every lookup as starlette's do."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from gateway.surfaces.hot_routes import HotRequest, HotRoutes, _Headers, hot_endpoints

pytestmark = pytest.mark.anyio


async def hot(request: Request) -> Response:
    return PlainTextResponse("hot")


async def routed(request: Request) -> Response:
    return PlainTextResponse("routed")


def app(root_path: str = "") -> HotRoutes:
    routes = [
        Route("/v1/chat/completions", hot, methods=["POST"]),
        Route("/v1/models", routed, methods=["GET"]),
        Route("/v1/chat/completions/", routed, methods=["POST"]),
    ]
    starlette = Starlette(routes=routes)
    assert hot_endpoints(routes) == {("POST", "/v1/chat/completions"): hot}
    inner = HotRoutes(starlette, hot_endpoints(routes))

    async def with_root(scope, receive, send):  # type: ignore[no-untyped-def]
        if root_path:
            scope = {**scope, "root_path": root_path, "path": root_path + scope["path"]}
        await inner(scope, receive, send)

    return with_root  # type: ignore[return-value]


@pytest.mark.parametrize("root_path", ["", "/gateway"])
async def test_only_the_exact_hot_route_skips_the_router(root_path: str) -> None:
    transport = httpx.ASGITransport(app=app(root_path))
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        assert (await client.post("/v1/chat/completions")).text == "hot"
        assert (await client.post("/v1/chat/completions/")).text == "routed"
        assert (await client.get("/v1/models")).text == "routed"
        assert (await client.get("/v1/chat/completions")).status_code == 405
        assert (await client.post("/v1/other")).status_code == 404


_NAMES = st.sampled_from(["authorization", "x-toolgate-tools", "content-type", "x-a", "é-x"])
_VALUES = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=255), max_size=8)


@given(
    st.lists(st.tuples(_NAMES, _VALUES), max_size=8),
    st.lists(st.sampled_from(["Authorization", "x-toolgate-tools", "X-A", "absent", "É-X"])),
)
def test_the_hot_routes_headers_answer_as_starlettes_do(
    pairs: list[tuple[str, str]], lookups: list[str]
) -> None:
    raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in pairs]
    scope = {"type": "http", "headers": raw}
    fast, plain = HotRequest(scope).headers, Request(dict(scope)).headers
    assert isinstance(fast, _Headers)
    for key in lookups:
        assert fast.get(key) == plain.get(key)
        assert fast.get(key, "none") == plain.get(key, "none")
        assert (key in fast) == (key in plain)
        assert fast.getlist(key.lower()) == plain.getlist(key.lower())
        if key in plain:
            assert fast[key] == plain[key]
        else:
            with pytest.raises(KeyError):
                fast[key]
    assert 42 not in fast  # type: ignore[comparison-overlap]  # a Mapping takes any key
