"""Saved mixed turns (docs/design.md §6) belong to the conversation and the user they were
saved for: presenting the same model-chosen call id from another conversation or as
another user restores nothing; its owner gets it back on every replay."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionFunctionToolParam

from tests.support.recorder import Answer, Received, Recorder
from tests.support.scripted import (
    MODEL,
    TENANT_KEY,
    Harness,
    Model,
    asks,
    call,
    config,
    says,
    tool,
)

WEATHER: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
}


def _mixed(body: dict[str, Any]) -> dict[str, Any]:
    """Asks for the server's account tool and the client's weather tool at once, with
    fixed call ids (as a model may well choose), then answers from what it was given."""
    results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    if not results:
        return asks(call("account", {}, "call_srv"), call("get_weather", {}, "call_w"))
    return says(" | ".join(results))


def _account(hit: Received) -> Answer:
    user = hit.headers.get("x-user", "")
    return Answer(body=json.dumps({"owner": user, "balance": f"PRIVATE-{user}"}).encode())


class Setup:
    def __init__(self, harness: Harness) -> None:
        self.tools = Recorder(_account)
        self.model = Model(_mixed)
        account = tool(
            "account",
            f"{harness.serve(self.tools).url}/account",
            {"user": {"type": "string"}},
            bind={"user": "{header.x-toolgate-user}"},
        )
        account["http"]["headers"] = {"X-User": "{user}"}
        gateway = harness.gateway(config(harness.serve(self.model.recorder).url, [account]))
        self.base_url = f"{gateway.url}/v1"
        self._clients: list[openai.OpenAI] = []

    def client(self, user: str) -> openai.OpenAI:
        client = openai.OpenAI(
            base_url=self.base_url,
            api_key=TENANT_KEY,
            max_retries=0,
            default_headers={"x-toolgate-user": user},
        )
        self._clients.append(client)
        return client

    def first_leg(self, user: str, question: str) -> list[Any]:
        completion = self.client(user).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": question}], tools=[WEATHER]
        )
        [handed] = completion.choices[0].message.tool_calls or []
        assert handed.id == "call_w"  # the server call stays hidden
        return [
            {"role": "user", "content": question},
            {"role": "assistant", "content": None, "tool_calls": [handed.model_dump()]},
            {"role": "tool", "tool_call_id": "call_w", "content": "sunny"},
        ]

    def continue_as(self, user: str, history: list[Any]) -> str:
        completion = self.client(user).chat.completions.create(
            model=MODEL, messages=history, tools=[WEATHER]
        )
        return completion.choices[0].message.content or ""

    def close(self) -> None:
        for client in self._clients:
            client.close()


@pytest.fixture
def setup(harness: Harness) -> Iterator[Setup]:
    made = Setup(harness)
    yield made
    made.close()


def test_another_user_of_the_tenant_presenting_the_call_id_gets_nothing(setup: Setup) -> None:
    history = setup.first_leg("alice", "my balance and the weather?")
    answer = setup.continue_as("mallory", history)
    assert "PRIVATE-alice" not in answer
    assert "PRIVATE-alice" not in json.dumps(setup.model.requests[-1])
    assert [m["role"] for m in setup.model.requests[-1]["messages"]] == [
        "user",
        "assistant",
        "tool",
    ]
    # mallory's attempt did not consume it: alice still gets her turn back
    assert (
        setup.continue_as("alice", history) == '{"owner":"alice","balance":"PRIVATE-alice"} | sunny'
    )
    assert [h.headers["x-user"] for h in setup.tools.hits] == ["alice"]


def test_the_same_call_id_in_another_conversation_restores_nothing(setup: Setup) -> None:
    setup.first_leg("alice", "my balance and the weather?")
    other = [
        {"role": "user", "content": "something else entirely"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_w",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_w", "content": "rain"},
    ]
    assert "PRIVATE" not in setup.continue_as("alice", other)
    assert "PRIVATE" not in json.dumps(setup.model.requests[-1])


def test_a_turn_comes_back_on_every_replay_by_its_owner_and_never_to_another(
    setup: Setup,
) -> None:
    """An agent resends its whole session every turn: the hidden turn is part of the
    conversation from then on, for its owner only."""
    history = setup.first_leg("alice", "my balance and the weather?")
    assert "PRIVATE-alice" in setup.continue_as("alice", history)
    assert "PRIVATE-alice" in setup.continue_as("alice", history)  # and again
    assert setup.continue_as("bob", history) == "sunny"
    assert "PRIVATE" not in json.dumps(setup.model.requests[-1])


def test_each_user_gets_their_own_turn_back_under_the_same_call_ids(setup: Setup) -> None:
    question = "my balance and the weather?"
    alice, bob = setup.first_leg("alice", question), setup.first_leg("bob", question)
    assert alice == bob  # the very same visible conversation and call ids
    assert "PRIVATE-bob" in setup.continue_as("bob", bob)
    assert "PRIVATE-alice" in setup.continue_as("alice", alice)
