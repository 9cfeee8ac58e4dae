"""Stored responses and conversations (docs/design.md §11) on every backend: their
conversation kept as the gateway's values with a version (``message_records``), read
back as it was written; what the gateway wrote before (version 1: chat messages, under
the old key) is still read after an upgrade; a record of no known shape is not found,
never an error."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.chat_json import decode_messages, encode_messages
from gateway.store import GuardedStore, Keys
from gateway.store.conversations import Conversation, ConversationStore, Entry
from gateway.store.message_records import (
    HEAVY_BYTES,
    HEAVY_MESSAGES,
    RecordUnreadable,
    message_records,
    read_messages,
    read_v1,
)
from gateway.store.responses import ResponseStore, StoredResponse
from gateway.values import NULL_CONTENT, Message, Part, ToolCall

pytestmark = pytest.mark.anyio

CHAT: list[dict[str, Any]] = [
    {"role": "system", "content": "be brief"},
    {
        "role": "user",
        "name": "ann",
        "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "https://x/i.png"}},
        ],
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}},
            {"id": "c2", "type": "custom", "custom": {"name": "patch", "input": "*** x"}},
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "a cat"},
    {"role": "assistant", "content": "A cat."},
]
MESSAGES = list(decode_messages(CHAT))
RESPONSE = {"id": "resp_1", "object": "response", "status": "completed", "output": []}
ITEMS = [{"id": "msg_1", "type": "message", "role": "user", "content": []}]


def test_the_values_are_what_the_chat_said() -> None:
    assert MESSAGES[1].content == (
        Part("text", "what is this?"),
        Part("image_url", None, {"image_url": {"url": "https://x/i.png"}}),
    )
    assert MESSAGES[1].extra == {"name": "ann"}
    assert MESSAGES[2] == Message(
        "assistant",
        None,
        (ToolCall("c1", "look", "{}"), ToolCall("c2", "patch", "*** x", "custom")),
        extra=NULL_CONTENT,
    )


async def test_a_stored_response_reads_back_as_it_was_written(
    backend: tuple[GuardedStore, Keys],
) -> None:
    store, keys = backend
    responses = ResponseStore(store, keys, ttl_s=60)
    stored = StoredResponse(RESPONSE, ITEMS, MESSAGES, "owner", "tool 'look'")
    assert await responses.save("acme", stored)
    assert await responses.load("acme", "resp_1") == stored
    written = json.loads(await store.get(keys.stored_response("acme", "resp_1")) or b"")
    assert written["v"] == 2
    assert written["messages"] == message_records(MESSAGES)  # values, not a dialect
    assert await responses.delete("acme", "resp_1")
    assert await responses.load("acme", "resp_1") is None
    assert not await responses.delete("acme", "resp_1")


async def test_a_response_version_1_stored_is_read_after_the_upgrade(
    backend: tuple[GuardedStore, Keys],
) -> None:
    store, keys = backend
    responses = ResponseStore(store, keys, ttl_s=60)
    record = {
        "response": RESPONSE,
        "input_items": ITEMS,
        "messages": CHAT,
        "owner": "owner",
        "taint": None,
    }
    await store.put(keys.response("acme", "resp_1"), json.dumps(record).encode(), 60)
    loaded = await responses.load("acme", "resp_1")
    assert loaded == StoredResponse(RESPONSE, ITEMS, MESSAGES, "owner")
    assert encode_messages(loaded.messages) == CHAT  # the model reads what it read before
    assert await responses.delete("acme", "resp_1")
    assert await store.get(keys.response("acme", "resp_1")) is None


@pytest.mark.parametrize(
    "record",
    [
        b'{"v": 3, "response": {"id": "resp_1"}}',
        b'{"v": 2, "response": {"id": "resp_1"}, "input_items": [], "messages": [{}]}',
        b'{"response": {"id": "resp_1"}, "input_items": [], "messages": [{"role": 1}]}',
        b'{"response": [], "input_items": [], "messages": []}',
    ],
)
async def test_a_response_of_no_known_shape_is_not_found(
    backend: tuple[GuardedStore, Keys], record: bytes
) -> None:
    store, keys = backend
    await store.put(keys.stored_response("acme", "resp_1"), record, 60)
    assert await ResponseStore(store, keys, ttl_s=60).load("acme", "resp_1") is None


async def test_a_conversation_moves_to_version_2_when_saved_again(
    backend: tuple[GuardedStore, Keys],
) -> None:
    store, keys = backend
    conversations = ConversationStore(store, keys, ttl_s=60)
    record = {
        "id": "conv_1",
        "created_at": 1,
        "metadata": {"k": "v"},
        "owner": "owner",
        "entries": [[ITEMS[0], CHAT[:2]], [None, CHAT[2:4]], [None, CHAT[4:]]],
        "taint": "tool 'look'",
    }
    await store.put(keys.conversation("acme", "conv_1"), json.dumps(record).encode(), 60)
    loaded = await conversations.load("acme", "conv_1")
    assert loaded is not None
    assert loaded.messages == MESSAGES
    assert loaded.items == ITEMS
    assert loaded.taint == "tool 'look'"
    await conversations.save("acme", loaded)
    assert await store.get(keys.conversation("acme", "conv_1")) is None  # moved
    again = await conversations.load("acme", "conv_1")
    assert again is not None
    assert (again.messages, again.items, again.metadata) == (MESSAGES, ITEMS, {"k": "v"})
    await conversations.delete("acme", "conv_1")
    assert await conversations.load("acme", "conv_1") is None


async def test_a_conversation_reads_back_as_it_was_written(
    backend: tuple[GuardedStore, Keys],
) -> None:
    store, keys = backend
    conversations = ConversationStore(store, keys, ttl_s=60)
    made = Conversation("conv_2", 5, {}, "owner", [Entry(ITEMS[0], MESSAGES)])
    await conversations.save("acme", made)
    assert await conversations.load("acme", "conv_2") == made


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(JSON, max_size=4))
def test_any_record_reads_as_messages_or_as_unreadable(record: list[Any]) -> None:
    for read in (read_messages, read_v1):
        try:
            messages = read(record)
        except RecordUnreadable:
            continue
        assert read_messages(json.loads(json.dumps(message_records(messages)))) == messages


async def test_a_long_conversation_is_written_and_read_as_a_short_one(
    backend: tuple[GuardedStore, Keys],
) -> None:
    """Past ``HEAVY_MESSAGES`` and ``HEAVY_BYTES`` the work is done off the event loop:
    what is kept and read back is the same."""
    store, keys = backend
    long = [Message("user", f"question {i} " + "x" * 300) for i in range(HEAVY_MESSAGES + 1)]
    responses = ResponseStore(store, keys, ttl_s=60)
    stored = StoredResponse(RESPONSE, ITEMS, long, "owner")
    assert await responses.save("acme", stored)
    assert len(await store.get(keys.stored_response("acme", "resp_1")) or b"") > HEAVY_BYTES
    assert await responses.load("acme", "resp_1") == stored
    conversations = ConversationStore(store, keys, ttl_s=60)
    made = Conversation("conv_3", 5, {}, "owner", [Entry(None, long)])
    await conversations.save("acme", made)
    assert await conversations.load("acme", "conv_3") == made
