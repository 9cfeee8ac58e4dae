"""A client's history as the saved turns read it (docs/design.md §6): each message reduced
to what identifies it (``turns.Seen``), and the saved turns that apply put back into
it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.store.turn_codec import put_back
from gateway.store.turns import Restored, Seen
from gateway.values import NO_EXTRA, Message, as_message


def seen(message: Message) -> Seen:
    """What identifies a message however a client re-serialises it — its role, its
    text, its tool call ids, the call it answers — and the calls an assistant
    message makes. A field the gateway read in no shape it knows (``extra``) counts
    as it came, as version 1 read it, so that a binding does not change with an
    upgrade."""
    if message.extra is not NO_EXTRA and not _READ.isdisjoint(message.extra):
        return _seen_as_sent(message)
    ids = [call.id for call in message.calls]
    identity = (message.role, message.text, ids, message.call_id)
    made = tuple(ids) if message.role == "assistant" else ()
    return Seen(identity, made)


_READ = frozenset({"content", "tool_calls", "tool_call_id"})


def _seen_as_sent(message: Message) -> Seen:
    extra = message.extra
    calls: Any = extra.get("tool_calls")
    if calls is None and message.calls:
        ids: list[Any] = [call.id for call in message.calls]
    else:
        ids = [c.get("id") for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []
    text = _text(extra["content"]) if "content" in extra else message.text
    call_id = extra.get("tool_call_id", message.call_id)
    listed = isinstance(calls, list) or bool(message.calls)
    made = tuple(str(i) for i in ids) if message.role == "assistant" and listed else ()
    return Seen((message.role, text, ids, call_id), made)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def seen_all(messages: Sequence[Message]) -> list[Seen]:
    return [seen(message) for message in messages]


def put_back_into(messages: Sequence[Message], restored: Restored) -> list[Message]:
    """``messages`` with each saved turn in place of the message that handed its
    calls back: the rounds before it, its whole turn, its server calls' outputs."""
    history: list[Message] = []
    for index, message in enumerate(messages):
        saved = restored.turns.get(index)
        if saved is None:
            history.append(message)
        else:
            history += [as_message(item) for item in put_back(saved)]
    return history
