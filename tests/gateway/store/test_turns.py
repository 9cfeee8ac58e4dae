"""Saved turns (docs/design.md §6, §10) on every backend: kept as the engine's values with a
version, put back as they were; what the gateway wrote before (version 1: chat
messages, under the old key) is still put back after an upgrade, bound the same way;
a record of no known shape is a miss, never an error."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import chat_json as dialect
from gateway.chat_json import decode_messages, encode_messages
from gateway.store import GuardedStore, Keys
from gateway.store.message_records import RecordUnreadable
from gateway.store.turn_codec import SavedTurn, decode, encode, put_back
from gateway.store.turns import TurnStore, prefix_digests
from gateway.surfaces.history import put_back_into, seen_all
from gateway.values import AssistantMessage, ToolCall, ToolOutput
from tool_registry import canonical

pytestmark = pytest.mark.anyio

IDENTITY = "acme\0user-1"

# A conversation as a client sends it back: its question, the turn that handed a
# client call back (only the client's call: the server's is hidden), and its result.
VISIBLE: list[dict[str, Any]] = [
    {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
    {"role": "user", "content": "weather, and book it"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "book", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "booked"},
]
ASKED = VISIBLE[:2]  # what the request that handed the call back had

BEFORE = (
    AssistantMessage(None, (ToolCall("s0", "lookup", '{"q": "x"}'),)),
    ToolOutput("s0", "found"),
)
TURN = AssistantMessage(
    "checking",
    (
        ToolCall("s1", "weather", '{"city": "Oslo"}'),
        ToolCall("c1", "book", "{}"),
        ToolCall("p1", "patch", "*** Begin Patch", "custom"),
    ),
)
OUTPUTS = (ToolOutput("s1", "12 °C"),)
SAVED = SavedTurn(BEFORE, TURN, OUTPUTS, ("c1",), "tool 'weather'")


def old_prefix_digests(messages: list[dict[str, Any]], identity: str) -> list[str]:
    """The binding as version 1 computed it, from the chat messages themselves."""

    def text(content: Any) -> str:
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "".join(
                p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
            )
        return ""

    def visible(message: dict[str, Any]) -> list[Any]:
        calls = message.get("tool_calls")
        ids = [c.get("id") for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []
        return [message.get("role"), text(message.get("content")), ids, message.get("tool_call_id")]

    running = hashlib.sha256(identity.encode() + b"\0")
    digests = [running.hexdigest()]
    for message in messages:
        running.update(canonical(visible(message)).encode() + b"\0")
        digests.append(running.hexdigest())
    return digests


def version_1(saved: SavedTurn) -> bytes:
    """A saved turn exactly as version 1 wrote it."""
    record: dict[str, Any] = {
        "before": dialect.messages(saved.before),
        "assistant": dialect.turn_message(saved.turn),
        "results": dialect.messages(saved.outputs),
        "ids": list(saved.ids),
    }
    if saved.taint is not None:
        record["taint"] = saved.taint
    return json.dumps(record).encode()


def expected_history() -> list[dict[str, Any]]:
    return [*VISIBLE[:2], *dialect.messages(put_back(SAVED)), VISIBLE[3]]


def test_a_saved_turn_reads_back_as_it_was_written_in_either_version() -> None:
    assert decode(encode(SAVED)) == SAVED
    old = decode(version_1(SAVED))
    # Version 1 kept no refusal and wrote calls as chat messages carry them.
    assert old == SAVED
    assert dialect.messages(put_back(old)) == dialect.messages(put_back(SAVED))


@pytest.mark.parametrize(
    "record",
    [
        b"[]",
        b"{}",
        b'{"v": 3}',
        b'{"v": 2, "before": [], "turn": {"content": 1, "calls": []}, "outputs": [], "ids": []}',
        b'{"v": 2, "before": {}, "turn": {}, "outputs": [], "ids": []}',
        b'{"assistant": {"role": "user", "content": "x"}, "results": []}',
        b'{"assistant": {"role": "assistant", "tool_calls": [{"id": 1}]}, "results": []}',
        b"not json",
    ],
)
def test_a_record_of_no_known_shape_is_unreadable(record: bytes) -> None:
    with pytest.raises(RecordUnreadable):
        decode(record)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
FIELDS = st.sampled_from(["v", "before", "turn", "outputs", "ids", "taint", "assistant", "results"])


@given(st.dictionaries(FIELDS, JSON | st.just(2) | st.just(1), max_size=8))
def test_any_record_reads_as_a_turn_or_as_unreadable(record: dict[str, Any]) -> None:
    try:
        saved = decode(json.dumps(record).encode())
    except RecordUnreadable:
        return
    assert decode(encode(saved)) == saved


MESSAGE = st.fixed_dictionaries(
    # A role is a string in every history the gateway reads (the chat surface answers
    # any other with a 400).
    {"role": st.sampled_from(["user", "assistant", "tool", "system"])},
    optional={
        "content": JSON,
        "tool_calls": st.lists(st.dictionaries(st.sampled_from(["id", "type"]), JSON), max_size=3)
        | JSON,
        "tool_call_id": JSON,
    },
)


@given(st.lists(MESSAGE, max_size=6))
def test_a_history_is_bound_as_version_1_bound_it(messages: list[dict[str, Any]]) -> None:
    # A turn saved before the upgrade is found after it: the same digests.
    assert prefix_digests(seen_all(decode_messages(messages)), IDENTITY) == old_prefix_digests(
        messages, IDENTITY
    )


async def test_a_kept_turn_is_put_back(backend: tuple[GuardedStore, Keys]) -> None:
    store, keys = backend
    turns = TurnStore(store, keys, ttl_s=60)
    keep = turns.keeper("acme", lambda: seen_all(decode_messages(ASKED)), IDENTITY)
    await keep(list(SAVED.before), SAVED.turn, list(SAVED.outputs), (TURN.calls[1],), SAVED.taint)
    restored = await turns.restore("acme", seen_all(decode_messages(VISIBLE)), IDENTITY)
    assert restored is not None
    assert restored.taint == SAVED.taint
    assert encode_messages(put_back_into(decode_messages(VISIBLE), restored)) == expected_history()
    # Bound to the history and to the caller: another user finds nothing.
    assert await turns.restore("acme", seen_all(decode_messages(VISIBLE)), "acme\0user-2") is None


async def test_a_turn_version_1_saved_is_put_back_after_the_upgrade(
    backend: tuple[GuardedStore, Keys],
) -> None:
    store, keys = backend
    turns = TurnStore(store, keys, ttl_s=60)
    conversation = old_prefix_digests(ASKED, IDENTITY)[-1]
    bound = hashlib.sha256(f"{conversation}\0c1".encode()).hexdigest()
    await store.put(keys.turn("acme", bound), version_1(SAVED), 60)
    await store.put(keys.turn("acme", bound) + ":mark", b"1", 60)
    restored = await turns.restore("acme", seen_all(decode_messages(VISIBLE)), IDENTITY)
    assert restored is not None
    assert restored.taint == SAVED.taint
    assert encode_messages(put_back_into(decode_messages(VISIBLE), restored)) == expected_history()


async def test_an_unreadable_turn_is_a_miss(backend: tuple[GuardedStore, Keys]) -> None:
    store, keys = backend
    turns = TurnStore(store, keys, ttl_s=60)
    conversation = prefix_digests(seen_all(decode_messages(ASKED)), IDENTITY)[-1]
    bound = hashlib.sha256(f"{conversation}\0c1".encode()).hexdigest()
    await store.put(keys.saved_turn("acme", bound), b'{"v": 99}', 60)
    await store.put(keys.saved_turn("acme", bound) + ":mark", b"1", 60)
    assert await turns.restore("acme", seen_all(decode_messages(VISIBLE)), IDENTITY) is None
    assert turns.misses == 1
