"""What a run was asked and what it answered, as its console page shows them: read
from the run's recording (docs/replay.md), which alone keeps the request's words; a run
that was not recorded says so (its tenant's ``record`` keeps them)."""

from __future__ import annotations

from typing import Any

from tool_registry import immutable

SHOWN_CHARS = 2000  # of each, on the page (the trace has the whole)


@immutable
class Exchanged:
    """A run's last user message and its answer, cut for a page; ``recorded``: whether
    the run's recording was there to read them from."""

    asked: str | None = None
    answered: str | None = None
    recorded: bool = False


def exchanged(trace: dict[str, Any] | None) -> Exchanged:
    recording = trace.get("recording") if isinstance(trace, dict) else None
    if not isinstance(recording, dict) or recording.get("kept") is not True:
        return Exchanged()
    loop = recording.get("loop")
    params = loop.get("params") if isinstance(loop, dict) else None
    messages = params.get("messages") if isinstance(params, dict) else None
    asked = None
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, dict) and message.get("role") == "user":
            asked = _text(message.get("content"))
            break
    return Exchanged(_cut(asked), _cut(_answer(recording.get("ended"))), True)


def _text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        said = "\n".join(p for p in parts if isinstance(p, str))
        return said or ("[" + ", ".join(_kinds(content)) + "]" if content else None)
    return None


def _kinds(parts: list[Any]) -> list[str]:
    return [str(p.get("type", "part"))[:32] for p in parts if isinstance(p, dict)]


def _answer(ended: Any) -> str | None:
    if not isinstance(ended, dict):
        return None
    if ended.get("kind") == "hand_back":
        calls = ended.get("calls")
        listed = calls if isinstance(calls, list) else []
        names = [str(c.get("name"))[:64] for c in listed if isinstance(c, dict)]
        return "Handed back to the client: " + ", ".join(names) if names else None
    said = ended.get("content") or ended.get("refusal")
    return said if isinstance(said, str) else None


def _cut(text: str | None) -> str | None:
    if text is None or len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}… ({len(text) - SHOWN_CHARS:,} more characters in the trace)"
