"""What chat completions' contract refuses in a tool message, moved where it may stand.

A ``tool`` message's content is text: a string, or text parts (OpenAI's
``ChatCompletionRequestToolMessage``). A client whose tool answered with an image (Claude
Code's ``Read`` of a screenshot, a Messages ``tool_result`` holding an image block) sends
it there; a chat upstream refuses the request. The image parts of a run of tool messages
go to one user message right after the run (tool messages must follow their assistant
turn without a break), each tool message saying where its parts went.
"""

from __future__ import annotations

from typing import Any

MOVED = "[the tool answered with {count} attachment(s): in the user message after the results]"
INTRO = "The tool results above came with these attachments:"


def tool_media_moved(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with every non-text part of a ``tool`` message moved to a user
    message after its run of tool messages; ``messages`` itself when none has one."""
    for message in messages:  # the common case, at the least cost: no tool message's list
        if message.get("role") == "tool" and type(message.get("content")) is list:
            break
    else:
        return messages
    out: list[dict[str, Any]] = []
    moved: list[Any] = []
    for message in messages:
        if moved and message.get("role") != "tool":
            out.append({"role": "user", "content": [{"type": "text", "text": INTRO}, *moved]})
            moved = []
        if not _has_media(message):
            out.append(message)
            continue
        parts = message["content"]
        texts = [p for p in parts if isinstance(p, dict) and p.get("type") == "text"]
        media = [p for p in parts if not (isinstance(p, dict) and p.get("type") == "text")]
        note = {"type": "text", "text": MOVED.format(count=len(media))}
        out.append({**message, "content": [*texts, note]})
        moved += media
    if moved:
        out.append({"role": "user", "content": [{"type": "text", "text": INTRO}, *moved]})
    return out


def _has_media(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return (
        message.get("role") == "tool"
        and isinstance(content, list)
        and any(not (isinstance(p, dict) and p.get("type") == "text") for p in content)
    )
