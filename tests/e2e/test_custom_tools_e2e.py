"""``custom`` (freeform) tools on ``/v1/responses`` (Codex CLI's ``apply_patch`` for a
model it knows): a chat-completions model is offered a function of one string
``input``, the gateway runs its server tools in the same loop, and the model's call
is handed back as a ``custom_tool_call`` item that the stock SDK parses; the client's
``custom_tool_call_output`` continues it, with the whole input or by
``previous_response_id`` (docs/design.md §11)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.recorder import Answer, Recorder
from tests.support.scripted import (
    MODEL,
    OTHER_KEY,
    Harness,
    Model,
    config,
    says,
)

from .test_namespace_tools_e2e import SHELL, gateway_for, respond, server_round_then
from .test_responses_e2e import events_of, sdk

GRAMMAR = 'start: begin_patch hunk+ end_patch\nbegin_patch: "*** Begin Patch" LF'
APPLY_PATCH: Any = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Use the `apply_patch` tool to edit files.",
    "format": {"type": "grammar", "syntax": "lark", "definition": GRAMMAR},
}
PATCH = '*** Begin Patch\n*** Add File: hello.txt\n+hi "there"\n*** End Patch\n'
length_then_patch = server_round_then("apply_patch", {"input": PATCH}, "c_patch", "patched:")


def test_a_custom_tool_is_offered_to_the_model_as_a_function_of_one_string(
    harness: Harness,
) -> None:
    model = Model(says("ok"))
    client = sdk(harness, gateway_for(harness, model))
    response = client.responses.create(model=MODEL, input="go", tools=[APPLY_PATCH, SHELL])
    assert response.output_text == "ok"
    offered = {t["function"]["name"]: t["function"] for t in model.requests[0]["tools"]}
    assert sorted(offered) == ["apply_patch", "exec_command", "string_length"]
    patch = offered["apply_patch"]
    assert patch["parameters"]["required"] == ["input"]
    assert patch["description"] == (
        "Use the `apply_patch` tool to edit files.\n\n"
        f"`input` must follow this lark grammar:\n{GRAMMAR}"
    )
    listed = [t.model_dump(exclude_none=True) for t in response.tools]
    assert listed[0] == APPLY_PATCH  # the response lists the tool as the client sent it


@pytest.mark.parametrize("stream", [False, True])
def test_a_custom_call_is_handed_back_as_a_custom_tool_call_and_continued(
    harness: Harness, stream: bool
) -> None:
    model = Model(length_then_patch)
    client = sdk(harness, gateway_for(harness, model))
    params: dict[str, Any] = {"model": MODEL, "input": "add hello.txt", "tools": [APPLY_PATCH]}
    response = respond(client, params, stream)
    [handed] = response.output
    assert handed.type == "custom_tool_call"
    assert (handed.name, handed.call_id, handed.input) == ("apply_patch", "c_patch", PATCH)
    assert handed.id is not None
    assert handed.id.startswith("ctc_")

    # The client applies it and resends the whole input with the call as it got it.
    resent: Any = [
        {"role": "user", "content": "add hello.txt"},
        handed.model_dump(exclude_none=True, exclude={"id"}),
        {"type": "custom_tool_call_output", "call_id": "c_patch", "output": "Done!"},
    ]
    done = client.responses.create(model=MODEL, tools=[APPLY_PATCH], store=False, input=resent)
    assert done.output_text == "patched: Done!"
    history = model.requests[-1]["messages"]
    calls = [c for m in history if m.get("tool_calls") for c in m["tool_calls"]]
    assert [c["function"]["name"] for c in calls] == ["string_length", "apply_patch"]
    assert json.loads(calls[1]["function"]["arguments"]) == {"input": PATCH}
    assert history[-1] == {"role": "tool", "tool_call_id": "c_patch", "content": "Done!"}


def test_a_custom_call_continues_from_the_stored_response(harness: Harness) -> None:
    model = Model(length_then_patch)
    client = sdk(harness, gateway_for(harness, model))
    first = client.responses.create(model=MODEL, input="add hello.txt", tools=[APPLY_PATCH])
    [handed] = first.output
    assert handed.type == "custom_tool_call"
    output: Any = [{"type": "custom_tool_call_output", "call_id": handed.call_id, "output": "ok"}]
    done = client.responses.create(
        model=MODEL, tools=[APPLY_PATCH], previous_response_id=first.id, input=output
    )
    assert done.output_text == "patched: ok"
    items = client.responses.input_items.list(done.id)
    assert [item.type for item in items.data] == ["custom_tool_call_output"]
    assert items.data[0].id.startswith("ctco_")


def test_a_streamed_custom_call_is_its_input_events(harness: Harness) -> None:
    model = Model(length_then_patch)
    gateway = gateway_for(harness, model)
    events = events_of(gateway, {"model": MODEL, "input": "go", "tools": [APPLY_PATCH]})
    kinds = [e["type"] for e in events]
    assert "response.function_call_arguments.delta" not in kinds
    [delta] = [e for e in events if e["type"] == "response.custom_tool_call_input.delta"]
    [done] = [e for e in events if e["type"] == "response.custom_tool_call_input.done"]
    assert delta["delta"] == done["input"] == PATCH
    [added] = [e["item"] for e in events if e["type"] == "response.output_item.added"]
    assert (added["type"], added["input"], added["id"]) == ("custom_tool_call", "", done["item_id"])
    assert events[-1]["response"]["output"][0]["input"] == PATCH


def test_an_upstream_that_serves_the_responses_api_gets_custom_tools_as_sent(
    harness: Harness,
) -> None:
    recorder = Recorder(
        lambda hit: Answer(body=json.dumps({"id": "resp_up", "model": "up"}).encode())
    )
    data = config(harness.serve(recorder).url, [])
    data["upstreams"][0]["responses_api"] = True
    gateway = harness.gateway(data)
    body = {"model": MODEL, "input": "hi", "tools": [APPLY_PATCH, SHELL]}
    response = harness.client(gateway, OTHER_KEY).post("/v1/responses", json=body)
    assert response.status_code == 200, response.text
    [hit] = recorder.hits
    assert hit.raw_path == "/v1/responses"
    assert json.loads(hit.body) == body  # no server tools in play: passed through
