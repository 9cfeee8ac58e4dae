"""A client's chat history as the saved turns read it (DESIGN.md §6): each message
decoded into what identifies it (``turns.Seen``), and the saved turns that apply put
back into it, encoded in the chat dialect."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.store.turn_codec import put_back
from gateway.store.turns import Restored, Seen
from gateway.upstream import dialect


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def seen(message: dict[str, Any]) -> Seen:
    """What identifies a message however a client re-serialises it — its role, its
    text, its tool call ids, the call it answers — and the calls an assistant
    message makes."""
    calls = message.get("tool_calls")
    ids = [c.get("id") for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []
    role = message.get("role")
    identity = (role, _text(message.get("content")), ids, message.get("tool_call_id"))
    made = tuple(str(i) for i in ids) if role == "assistant" and isinstance(calls, list) else ()
    return Seen(identity, made)


def seen_all(messages: Sequence[dict[str, Any]]) -> list[Seen]:
    return [seen(message) for message in messages]


def put_back_into(messages: list[dict[str, Any]], restored: Restored) -> list[dict[str, Any]]:
    """``messages`` with each saved turn in place of the message that handed its
    calls back: the rounds before it, its whole turn, its server calls' outputs."""
    history: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        saved = restored.turns.get(index)
        if saved is None:
            history.append(message)
        else:
            history += dialect.messages(put_back(saved))
    return history
