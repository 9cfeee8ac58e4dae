"""A tool call's request is sent as it was built (``ToolRequest``, on aiohttp directly),
and what reaches the tool is what the same request made into httpx's reached it with:
the request line byte for byte, every header (aiohttp writes ``host`` and
``content-length`` where httpx did), the body. A real server records both."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.support.recorder import Received, Recorder
from tests.support.scripted import Harness
from tool_registry import ToolExecutor, create_tool_transport
from tool_registry.egress import EgressPolicy
from tool_registry.request_builder import ToolRequest, build_request
from tool_registry.spec import HttpSpec, ToolSpec
from tool_registry.tool import HttpTool, PreparedCall


def _tool(http: dict[str, Any]) -> HttpTool:
    return HttpTool(
        ToolSpec.model_validate(
            {"name": "t", "parameters": {"type": "object", "properties": {}}, "http": http}
        )
    )


pytestmark = pytest.mark.anyio

CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "a GET with a query and headers": (
        {
            "method": "GET",
            "url": "{base}/items/{id}?fixed=1",
            "headers": {"X-Api-Key": "k1", "X-User": "{user}"},
        },
        {"id": "a/../b", "user": "alice", "q": ["x y", "z"]},
    ),
    "a POST with a JSON body": (
        {"method": "POST", "url": "{base}/orders"},
        {"item": "café", "n": 3},
    ),
    "a POST whose optional body was left out": (
        {"method": "POST", "url": "{base}/ping", "body": "payload"},
        {},
    ),
    "a PUT with its own content type": (
        {
            "method": "PUT",
            "url": "{base}/doc",
            "body": "doc",
            "headers": {"Content-Type": "application/merge-patch+json"},
        },
        {"doc": {"note": "n"}},
    ),
    "a DELETE": ({"method": "DELETE", "url": "{base}/items/7"}, {"soft": True}),
}


def _seen(hit: Received) -> tuple[str, str, Counter[tuple[str, str]], bytes]:
    headers = Counter((name.lower(), value) for name, value in hit.header_list)
    return hit.method, hit.raw_path, headers, hit.body


@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_call_reaches_the_tool_as_httpxs_request_of_it_did(
    harness: Harness, case: str
) -> None:
    recorder = Recorder()
    base = harness.serve(recorder).url
    spec, arguments = CASES[case]
    http = HttpSpec.model_validate({**spec, "url": spec["url"].format(base=base, id="{id}")})
    request = build_request(http, arguments)
    transport = create_tool_transport(EgressPolicy(deny_private=False))
    try:
        for reply in (await transport.call(request), await transport.exchange(request.as_httpx())):
            await reply.aclose()
    finally:
        await transport.aclose()
    sent, modelled = recorder.hits
    assert _seen(sent) == _seen(modelled)
    assert sent.headers["user-agent"] == "toolgate"
    assert sent.headers["host"] == base.removeprefix("http://")


async def test_the_calls_own_headers_go_over_the_configured_ones(harness: Harness) -> None:
    """The trace context and a user's token win over configured headers of those names,
    in any letter case, and each is sent once."""
    recorder = Recorder()
    base = harness.serve(recorder).url
    tool = _tool(
        {
            "url": f"{base}/me",
            "headers": {"Authorization": "Bearer operator", "TraceParent": "configured"},
        }
    )
    transport = create_tool_transport(EgressPolicy(deny_private=False))
    call = PreparedCall(tool, {}, trace={"traceparent": "00-abc-def-01"}, bearer="user-token")
    try:
        result = await ToolExecutor(transport).execute(call)
    finally:
        await transport.aclose()
    assert result.outcome == "ok", result
    (hit,) = recorder.hits
    assert hit.all_values("authorization") == ["Bearer user-token"]
    assert hit.all_values("traceparent") == ["00-abc-def-01"]


async def test_a_redirect_hop_is_a_tool_request_too(harness: Harness) -> None:
    """A followed redirect's next hop is sent as the first was (its guard judged)."""
    from tests.support.recorder import Answer

    def respond(hit: Received) -> Answer:
        if hit.raw_path == "/old":
            return Answer(302, b"", [("location", "/new?x=1")])
        return Answer()

    recorder = Recorder(respond)
    base = harness.serve(recorder).url
    tool = _tool({"url": f"{base}/old", "follow_redirects": True})
    transport = create_tool_transport(EgressPolicy(deny_private=False))
    try:
        result = await ToolExecutor(transport).execute(PreparedCall(tool, {}))
    finally:
        await transport.aclose()
    assert result.outcome == "ok", result
    assert [hit.raw_path for hit in recorder.hits] == ["/old", "/new?x=1"]
    assert recorder.hits[1].headers["user-agent"] == "toolgate"


def test_httpxs_request_of_a_call_is_the_call_again() -> None:
    http = HttpSpec.model_validate(
        {"method": "POST", "url": "http://t.example/a?b=1", "headers": {"X-K": "v"}}
    )
    request = build_request(http, {"n": 1})
    again = ToolRequest.of(request.as_httpx())
    assert again == request
    assert dict(again.headers) == {
        "user-agent": "toolgate",
        "x-k": "v",
        "content-type": "application/json",
    }
