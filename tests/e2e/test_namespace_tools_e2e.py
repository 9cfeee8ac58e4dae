"""``namespace`` tools on ``/v1/responses`` (Codex CLI's multi-agent tools): a
chat-completions model is offered each function under one flat name, and a call is
handed back in the shape the client sent — its own name and its ``namespace`` — which
the client's next request carries back (docs/design.md §11)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai
import pytest

from tests.support.hostile import LoopWatch
from tests.support.recorder import Answer, Recorder
from tests.support.schema import assert_valid_response
from tests.support.scripted import (
    MODEL,
    Harness,
    Model,
    asks,
    call,
    config,
    says,
    tool,
)

from .test_responses_e2e import sdk

AGENTS: Any = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Work with sub-agents.",
    "tools": [
        {
            "type": "function",
            "name": "spawn_agent",
            "description": "Start a sub-agent.",
            "parameters": {"type": "object", "properties": {"task": {"type": "string"}}},
        },
        {"type": "function", "name": "wait", "parameters": {"type": "object"}},
    ],
}
SHELL: Any = {"type": "function", "name": "exec_command", "parameters": {"type": "object"}}
FLAT = "multi_agent_v1__spawn_agent"


def server_round_then(
    name: str, arguments: dict[str, Any], call_id: str, said: str
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A model that runs a server tool round, then calls the client's tool ``name``,
    then answers ``said`` and the client's output."""

    def script(body: dict[str, Any]) -> dict[str, Any]:
        results = [m for m in body["messages"] if m["role"] == "tool"]
        if not results:
            return asks(call("string_length", {"s": "hello"}, "c_len"))
        if len(results) == 1:
            return asks(call(name, arguments, call_id))
        return says(f"{said} {results[-1]['content']}")

    return script


def respond(client: openai.OpenAI, params: dict[str, Any], stream: bool) -> Any:
    """The final response, streamed or not (a non-streamed one checked against the schema)."""
    if stream:
        with client.responses.stream(**params) as events:
            return events.get_final_response()
    raw = client.responses.with_raw_response.create(**params)
    assert_valid_response(json.loads(raw.text))
    return raw.parse()


agent_then_answer = server_round_then(FLAT, {"task": "count"}, "c_agent", "agent said")


def gateway_for(harness: Harness, model: Model) -> Any:
    tools = harness.serve(Recorder(lambda hit: Answer(body=b'{"length": 5}')))
    length = tool("string_length", f"{tools.url}/len", {"s": {"type": "string"}})
    return harness.gateway(config(harness.serve(model.recorder).url, [length]))


@pytest.mark.parametrize("stream", [False, True])
def test_a_namespaced_call_is_handed_back_as_the_client_sent_it(
    harness: Harness, stream: bool
) -> None:
    model = Model(agent_then_answer)
    client = sdk(harness, gateway_for(harness, model))
    params: dict[str, Any] = {"model": MODEL, "input": "go", "tools": [AGENTS, SHELL]}
    response = respond(client, params, stream)
    [handed] = [item for item in response.output if item.type == "function_call"]
    assert (handed.name, handed.namespace, handed.call_id) == (
        "spawn_agent",
        "multi_agent_v1",
        "c_agent",
    )
    assert json.loads(handed.arguments) == {"task": "count"}
    offered = model.requests[0]["tools"]
    assert [t["function"]["name"] for t in offered] == [
        "string_length",
        FLAT,
        "multi_agent_v1__wait",
        "exec_command",
    ]
    assert offered[1]["function"]["description"] == "Work with sub-agents.\n\nStart a sub-agent."

    # The client runs it and resends the whole input, the call as it got it.
    resent: Any = [
        {"role": "user", "content": "go"},
        handed.model_dump(exclude_none=True, exclude={"id", "status"}),
        {"type": "function_call_output", "call_id": "c_agent", "output": "42"},
    ]
    done = client.responses.create(model=MODEL, tools=[AGENTS, SHELL], store=False, input=resent)
    assert done.output_text == "agent said 42"
    history = model.requests[-1]["messages"]
    calls = [c for m in history if m.get("tool_calls") for c in m["tool_calls"]]
    assert [c["function"]["name"] for c in calls] == [
        "string_length",
        FLAT,
    ]  # the hidden round put back
    assert history[-1] == {"role": "tool", "tool_call_id": "c_agent", "content": "42"}


def test_a_namespaced_name_that_collides_is_a_400(harness: Harness) -> None:
    client = sdk(harness, gateway_for(harness, Model(says("unused"))))
    clash: Any = {"type": "function", "name": FLAT, "parameters": {"type": "object"}}
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, input="go", tools=[AGENTS, clash])
    assert caught.value.body is not None
    assert "two tools are named" in str(caught.value)


def test_thousands_of_namespaced_functions_do_not_stall_the_gateway(harness: Harness) -> None:
    """Every name is checked against the others once, not against each in turn: 25,000
    functions in a body under the 1 MiB limit took 14 s of the event loop that way."""
    model = Model(says("ok"))
    gateway = harness.gateway(config(harness.serve(model.recorder).url, []))
    functions = [{"type": "function", "name": f"f{i}"} for i in range(25_000)]
    body = {"model": MODEL, "input": "hi", "tools": [{**AGENTS, "tools": functions}]}
    with LoopWatch(gateway) as watch:
        response = harness.client(gateway, timeout=60).post("/v1/responses", json=body)
    assert response.status_code == 200, response.text
    assert len(model.requests[0]["tools"]) == 25_000
    assert watch.longest < 3.0
