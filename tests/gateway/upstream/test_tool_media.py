"""Chat's tool messages hold text only: attachments move to a user turn after the run."""

from __future__ import annotations

from typing import Any

from gateway.upstream.openai.tool_media import INTRO, tool_media_moved

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}}


def test_a_history_with_no_attachment_in_a_tool_message_is_the_same_list() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "hi"}, IMAGE]},  # a user's: fine
        {"role": "tool", "tool_call_id": "a", "content": "plain"},
    ]
    assert tool_media_moved(messages) is messages


def test_a_run_of_tool_messages_keeps_its_order_and_its_attachments_follow_it() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": "x"}, IMAGE]},
        {"role": "tool", "tool_call_id": "b", "content": "plain"},
        {"role": "tool", "tool_call_id": "c", "content": [IMAGE]},
        {"role": "user", "content": "and?"},
    ]
    moved = tool_media_moved(messages)
    assert [m["role"] for m in moved] == ["assistant", "tool", "tool", "tool", "user", "user"]
    assert [p["type"] for p in moved[1]["content"]] == ["text", "text"]
    assert [p["type"] for p in moved[3]["content"]] == ["text"]
    assert moved[4]["content"] == [{"type": "text", "text": INTRO}, IMAGE, IMAGE]
    assert moved[5] == {"role": "user", "content": "and?"}
    last = tool_media_moved(messages[:4])  # a run at the end is followed all the same
    assert last[-1]["role"] == "user"
