"""Hosted tool types (``web_search``, ``file_search``, ...) a client sends on
``/v1/responses``: the tenant's ``hosted_tools`` drops them (the default), passes them
to an upstream that serves the Responses API, or refuses the request — never a 400 for
a client that did not ask for one (docs/design.md §11)."""

from __future__ import annotations

import json
from typing import Any

from tests.support.recorder import Answer, Recorder
from tests.support.schema import assert_valid_error, assert_valid_response
from tests.support.scripted import (
    MODEL,
    OTHER_KEY,
    Harness,
    Model,
    asks,
    call,
    config,
    says,
    tool,
)

WEB_SEARCH = {"type": "web_search", "external_web_access": True}
FILE_SEARCH = {"type": "file_search", "vector_store_ids": ["vs_1"]}
SHELL = {"type": "function", "name": "exec_command", "parameters": {"type": "object"}}


def server_round(body: dict[str, Any]) -> dict[str, Any]:
    if not [m for m in body["messages"] if m["role"] == "tool"]:
        return asks(call("string_length", {"s": "hello"}, "c_len"))
    return says("five")


def lengths(harness: Harness) -> str:
    server = harness.serve(Recorder(lambda hit: Answer(body=b'{"length": 5}')))
    return server.url


def test_by_default_hosted_tools_are_dropped_and_named(harness: Harness) -> None:
    model = Model(server_round)
    upstream = harness.serve(model.recorder)
    length = tool("string_length", f"{lengths(harness)}/len", {"s": {"type": "string"}})
    gateway = harness.gateway(config(upstream.url, [length]))
    body = {"model": MODEL, "input": "hi", "tools": [WEB_SEARCH, SHELL, FILE_SEARCH]}
    response = harness.client(gateway).post("/v1/responses", json=body)
    assert response.status_code == 200, response.text
    assert response.headers["x-toolgate-dropped-tools"] == "web_search,file_search"
    answer = response.json()
    assert_valid_response(answer)
    assert answer["output"][-1]["content"][0]["text"] == "five"
    assert [t["name"] for t in answer["tools"]] == ["exec_command"]
    for sent in model.requests:  # the model never hears of them
        assert [t["function"]["name"] for t in sent["tools"]] == ["string_length", "exec_command"]


def test_a_tenant_may_refuse_them(harness: Harness) -> None:
    upstream = harness.serve(Model(says("unused")).recorder)
    data = config(upstream.url, [])
    data["tenants"][1]["hosted_tools"] = "refuse"
    gateway = harness.gateway(data)
    body = {"model": MODEL, "input": "hi", "tools": [SHELL, WEB_SEARCH]}
    response = harness.client(gateway, OTHER_KEY).post("/v1/responses", json=body)
    assert response.status_code == 400
    assert_valid_error(response.json())
    error = response.json()["error"]
    assert error["param"] == "tools[1].type"
    assert "hosted_tools: refuse" in error["message"]


def native(harness: Harness, hosted_tools: str) -> tuple[Any, Recorder]:
    recorder = Recorder(
        lambda hit: Answer(body=json.dumps({"id": "resp_up", "model": "up"}).encode())
    )
    upstream = harness.serve(recorder)
    data = config(upstream.url, [])
    data["upstreams"][0]["responses_api"] = True
    data["tenants"][1]["hosted_tools"] = hosted_tools
    return harness.gateway(data), recorder


def test_pass_forwards_them_to_an_upstream_that_runs_them(harness: Harness) -> None:
    gateway, upstream = native(harness, "pass")
    body = {"model": MODEL, "input": "hi", "tools": [WEB_SEARCH, SHELL]}
    response = harness.client(gateway, OTHER_KEY).post("/v1/responses", json=body)
    assert response.status_code == 200
    assert "x-toolgate-dropped-tools" not in response.headers
    [hit] = upstream.hits
    assert json.loads(hit.body) == body


def test_drop_leaves_them_out_of_a_pass_through_too(harness: Harness) -> None:
    gateway, upstream = native(harness, "drop")
    body = {"model": MODEL, "input": "hi", "tools": [WEB_SEARCH, SHELL]}
    response = harness.client(gateway, OTHER_KEY).post("/v1/responses", json=body)
    assert response.status_code == 200
    assert response.headers["x-toolgate-dropped-tools"] == "web_search"
    [hit] = upstream.hits
    assert json.loads(hit.body) == {**body, "tools": [SHELL]}


def test_a_hostile_type_is_never_written_into_a_header(harness: Harness) -> None:
    """A type is the client's text: a newline or a megabyte in it must not reach the
    response's headers (nor break them)."""
    upstream = harness.serve(Model(says("fine")).recorder)
    gateway = harness.gateway(config(upstream.url, []))
    tools = [{"type": "web_search\r\nx-evil: 1"}, {"type": "é" * 10_000}, WEB_SEARCH]
    body = {"model": MODEL, "input": "hi", "tools": tools}
    response = harness.client(gateway, OTHER_KEY).post("/v1/responses", json=body)
    assert response.status_code == 200, response.text
    assert "x-evil" not in response.headers
    assert response.headers["x-toolgate-dropped-tools"] == "unnamed,web_search"
