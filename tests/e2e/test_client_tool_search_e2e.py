"""A client's own tool search (Codex's ``tool_search`` with ``execution: "client"``,
docs/design.md §17): the gateway offers it to a chat model as a function, hands its call
back as a ``tool_search_call`` item, reads the client's ``tool_search_output`` and
offers the tools it loaded — and withholds ``defer_loading`` tools until then. Driven
by the stock SDK; Codex CLI itself in ``test_codex_cli_e2e``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.scripted import MODEL, Harness, Model, asks, call, says

from .test_namespace_tools_e2e import gateway_for, respond
from .test_responses_e2e import events_of, sdk

SEARCH_TOOL: Any = {
    "type": "tool_search",
    "execution": "client",
    "description": "# Tool discovery\n\nSearches over deferred tool metadata.",
    "parameters": {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "number"}},
        "required": ["query"],
        "additionalProperties": False,
    },
}
DRAWER: Any = {
    "type": "function",
    "name": "open_drawer",
    "description": "Open a drawer of the desk.",
    "parameters": {"type": "object", "properties": {"which": {"type": "string"}}},
    "defer_loading": True,
}
DESK: Any = {
    "type": "namespace",
    "name": "mcp__desk__",
    "description": "Tools of the desk server.",
    "tools": [{k: v for k, v in DRAWER.items() if k != "defer_loading"}],
}


def offered(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools", [])]


def searcher(body: dict[str, Any]) -> dict[str, Any]:
    """Searches until a drawer tool is offered, calls it, then answers."""
    names = offered(body)
    last = body["messages"][-1]
    drawer = [n for n in names if n.endswith("open_drawer")]
    if last["role"] == "tool" and last["tool_call_id"] == "c_open":
        return says(f"drawer: {last['content']}")
    if drawer:
        return asks(call(drawer[0], {"which": "top"}, "c_open"))
    return asks(call("tool_search", {"query": "drawer", "limit": 3}, "c_search"))


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("loaded", [DRAWER, DESK], ids=["function", "namespace"])
def test_a_client_search_is_handed_back_and_what_it_loads_is_offered(
    harness: Harness, stream: bool, loaded: Any
) -> None:
    model = Model(searcher)
    gateway = gateway_for(harness, model)
    client = sdk(harness, gateway)
    tools = [SEARCH_TOOL, DRAWER]
    params: dict[str, Any] = {"model": MODEL, "input": "open it", "tools": tools, "store": False}
    response = respond(client, params, stream)
    [searched] = response.output
    assert searched.type == "tool_search_call"
    assert (searched.call_id, searched.execution) == ("c_search", "client")
    assert searched.arguments == {"query": "drawer", "limit": 3}
    assert searched.id.startswith("tsc_")
    first = model.requests[0]
    assert "tool_search" in offered(first)
    assert "open_drawer" not in offered(first)  # deferred until a search loads it
    assert first["tools"][-1]["function"]["description"].startswith("# Tool discovery")
    assert [t.type for t in response.tools] == ["tool_search", "function"]

    output: Any = {
        "type": "tool_search_output",
        "call_id": "c_search",
        "execution": "client",
        "status": "completed",
        "tools": [loaded],
    }
    resent: Any = [
        {"role": "user", "content": "open it"},
        searched.model_dump(exclude_none=True, exclude={"id"}),
        output,
    ]
    handed = respond(client, {**params, "input": resent}, stream)
    [opened] = handed.output
    assert opened.type == "function_call"
    assert opened.name == "open_drawer"
    if loaded is DESK:
        assert opened.namespace == "mcp__desk__"
    second = model.requests[1]
    history = second["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "tool"]
    assert history[1]["tool_calls"][0]["function"]["name"] == "tool_search"
    read = json.loads(history[2]["content"])
    assert read["loaded"] == [n for n in offered(second) if n.endswith("open_drawer")]


def test_the_streamed_search_call_comes_whole_and_valid(harness: Harness) -> None:
    model = Model(searcher)
    gateway = gateway_for(harness, model)
    events = events_of(gateway, {"model": MODEL, "input": "go", "tools": [SEARCH_TOOL]})
    added = [e for e in events if e["type"] == "response.output_item.added"]
    done = [e for e in events if e["type"] == "response.output_item.done"]
    assert [e["item"]["type"] for e in added] == ["tool_search_call"]
    assert done[0]["item"]["arguments"] == {"query": "drawer", "limit": 3}


def test_without_a_client_search_deferred_tools_are_offered_and_a_hosted_one_dropped(
    harness: Harness,
) -> None:
    model = Model(says("ok"))
    client = sdk(harness, gateway_for(harness, model))
    hosted: Any = {"type": "tool_search"}  # the hosted kind: the gateway runs none
    raw = client.responses.with_raw_response.create(model=MODEL, input="hi", tools=[DRAWER, hosted])
    assert raw.headers["x-toolgate-dropped-tools"] == "tool_search"
    assert offered(model.requests[0]) == ["string_length", "open_drawer"]
