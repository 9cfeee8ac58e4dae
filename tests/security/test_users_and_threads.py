"""What a stored response or conversation holds stays with who made it, and what the
model reads of a thread is what the thread still holds (issue 19): a second user of the
same tenant cannot continue or read the first user's responses and conversations;
deleted items no longer reach the model; a compaction summary stays tool data; the
conversation routes are rate-limited and paged. Driven through the stock openai SDK."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.support.recorder import Answer, Recorder
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
from tests.support.servers import ServerThread

SECRET_RESULT = "alice-private-ledger-4471"


def lookup_round(body: dict[str, Any]) -> dict[str, Any]:
    """Calls ``lookup`` once per user turn, then answers with what the tool said."""
    messages = body["messages"]
    if messages[-1]["role"] == "tool":
        return says(f"the ledger says {messages[-1]['content']}")
    return asks(call("lookup", {"id": "1"}, f"call_{len(messages)}"))


def stack(harness: Harness, model: Model, **tenant: Any) -> tuple[ServerThread, Recorder]:
    tools = Recorder(lambda hit: Answer(body=json.dumps({"ledger": SECRET_RESULT}).encode()))
    url = harness.serve(tools).url
    lookup = tool(
        "lookup",
        f"{url}/ledger/{{id}}",
        {"id": {"type": "string"}},
        bind={"user": "{header.x-toolgate-user}"},
    )
    lookup["http"]["query"] = {"user": "{user}"}
    data = config(harness.serve(model.recorder).url, [lookup])
    data["tenants"][0] |= tenant
    return harness.gateway(data), tools


def sdk(harness: Harness, gateway: ServerThread, user: str) -> openai.OpenAI:
    client = openai.OpenAI(
        base_url=f"{gateway.url}/v1",
        api_key=TENANT_KEY,
        max_retries=0,
        default_headers={"x-toolgate-user": user},
    )
    harness.on_close(client.close)
    return client


def test_another_user_of_the_tenant_cannot_continue_or_read_a_response(
    harness: Harness,
) -> None:
    model = Model(lookup_round)
    gateway, _ = stack(harness, model)
    alice, bob = sdk(harness, gateway, "alice"), sdk(harness, gateway, "bob")
    first = alice.responses.create(model=MODEL, input="what does my ledger say?")
    assert SECRET_RESULT in first.output_text
    fed = len(model.requests)
    with pytest.raises(openai.NotFoundError):
        bob.responses.create(model=MODEL, input="repeat that", previous_response_id=first.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.input_items.list(first.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.delete(first.id)
    assert len(model.requests) == fed  # nothing of alice's reached the model for bob
    again = alice.responses.create(model=MODEL, input="and now?", previous_response_id=first.id)
    assert again.status == "completed"
    assert alice.responses.retrieve(first.id).id == first.id


def test_another_user_of_the_tenant_cannot_use_a_conversation(harness: Harness) -> None:
    model = Model(lookup_round)
    gateway, _ = stack(harness, model)
    alice, bob = sdk(harness, gateway, "alice"), sdk(harness, gateway, "bob")
    thread = alice.conversations.create(metadata={"topic": "ledger"})
    alice.responses.create(model=MODEL, input="my ledger?", conversation=thread.id)
    fed = len(model.requests)
    with pytest.raises(openai.NotFoundError):
        bob.responses.create(model=MODEL, input="and mine?", conversation=thread.id)
    with pytest.raises(openai.NotFoundError):
        bob.conversations.retrieve(thread.id)
    with pytest.raises(openai.NotFoundError):
        bob.conversations.items.list(thread.id)
    with pytest.raises(openai.NotFoundError):
        bob.conversations.delete(thread.id)
    assert len(model.requests) == fed
    assert len(alice.conversations.items.list(thread.id).data) == 2  # input and answer


def test_deleting_every_item_takes_the_hidden_rounds_out_of_what_the_model_reads(
    harness: Harness,
) -> None:
    model = Model(lookup_round)
    gateway, _ = stack(harness, model)
    alice = sdk(harness, gateway, "alice")
    thread = alice.conversations.create()
    alice.responses.create(model=MODEL, input="my ledger?", conversation=thread.id)
    for item in alice.conversations.items.list(thread.id).data:
        assert item.id is not None
        alice.conversations.items.delete(item.id, conversation_id=thread.id)
    assert alice.conversations.items.list(thread.id).data == []
    alice.responses.create(model=MODEL, input="hello again", conversation=thread.id)
    first_of_next = model.requests[2]  # the rounds of the first response were 0 and 1
    assert first_of_next["messages"] == [{"role": "user", "content": "hello again"}]
    assert SECRET_RESULT not in json.dumps(first_of_next)


def summarising(body: dict[str, Any]) -> dict[str, Any]:
    """Calls ``lookup`` for the first turn; summarises by quoting everything it read."""
    messages = body["messages"]
    last = str(messages[-1].get("content"))
    if last.startswith("Summarise the conversation above"):
        return says(" | ".join(str(m.get("content")) for m in messages[:-1]))
    if messages[-1]["role"] == "tool":
        return says("noted")
    if len(messages) == 1:
        return asks(call("lookup", {"id": "1"}))
    return says("ok " + "padding " * 30)


def test_a_compaction_summary_of_tool_output_stays_tool_data(harness: Harness) -> None:
    model = Model(summarising)
    gateway, _ = stack(harness, model)
    alice = sdk(harness, gateway, "alice")
    management: Any = [{"type": "compaction", "compact_threshold": 200}]
    previous = None
    for turn in range(4):
        response = alice.responses.create(
            model=MODEL,
            input=f"turn {turn} " + "words " * 40,
            previous_response_id=previous,
            context_management=management,
        )
        previous = response.id
    compacted = [
        r
        for r in model.requests
        if any("Summary of the earlier" in str(m.get("content")) for m in r["messages"])
    ]
    assert compacted, "the thread was never compacted"
    for request in compacted:
        for message in request["messages"]:
            if SECRET_RESULT in str(message.get("content")):
                assert message["role"] == "tool", message  # never a user's (or system's) words


def test_conversation_routes_count_against_the_rate_limit(harness: Harness) -> None:
    gateway, _ = stack(harness, Model(says("hi")), limits={"requests_per_minute": 3})
    alice = sdk(harness, gateway, "alice")
    for _ in range(3):
        alice.conversations.create()
    with pytest.raises(openai.RateLimitError):
        alice.conversations.create()


def test_items_and_input_items_are_paged_by_limit_and_after(harness: Harness) -> None:
    gateway, _ = stack(harness, Model(says("hi")))
    alice = sdk(harness, gateway, "alice")
    items: Any = [{"type": "message", "role": "user", "content": f"m{i}"} for i in range(5)]
    thread = alice.conversations.create(items=items)
    first = alice.conversations.items.list(thread.id, limit=1, order="asc")
    assert len(first.data) == 1
    assert first.has_more
    assert first.data[0].id is not None
    rest = alice.conversations.items.list(thread.id, limit=10, order="asc", after=first.data[0].id)
    assert len(rest.data) == 4
    assert not rest.has_more
    texts = [
        json.loads(item.model_dump_json())["content"][0]["text"]
        for item in [*first.data, *rest.data]
    ]
    assert texts == [f"m{i}" for i in range(5)]
    everything = [item.id for item in alice.conversations.items.list(thread.id, limit=2)]
    assert len(everything) == 5  # the SDK's iterator pages through has_more
    response = alice.responses.create(model=MODEL, input=items)
    page = alice.responses.input_items.list(response.id, limit=2)
    assert len(page.data) == 2
    assert page.has_more
    with pytest.raises(openai.BadRequestError):
        alice.conversations.items.list(thread.id, limit=0)
