"""Requests a chat front-end sends in the background (issue 34 §6).

Besides the user's turns, front-ends send requests of their own: Open WebUI a title,
tags and follow-up questions for each chat (one user message beginning ``### Task:``),
LibreChat and LobeChat a title. They carry the chat's model and so, at a gateway, the
tenant's server tools: a model could call a tool while writing a title. Such a request
gets no server tools when it says ``tool_choice: "none"`` (any tenant), or when one
of its tenant's ``background`` rules matches it: an RE2 pattern over its last user
message's text, or a header's value.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gateway.config import BackgroundRule
from tool_registry import immutable, linear_pattern

TEXT_SEARCHED = 4096  # of the last user message: a task prompt says what it is at once


@immutable
class Background:
    """A tenant's rules, compiled once per snapshot."""

    patterns: tuple[Any, ...] = ()
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, rules: Sequence[BackgroundRule]) -> Background:
        return cls(
            tuple(linear_pattern(r.message) for r in rules if r.message is not None),
            tuple((r.header.lower(), r.value) for r in rules if r.header is not None),
        )

    def __bool__(self) -> bool:
        return bool(self.patterns or self.headers)

    def matches(self, text: Callable[[], str], headers: Mapping[str, str]) -> bool:
        """Whether a request is one of these (``text``: its last user message's)."""
        for name, value in self.headers:
            found = headers.get(name)
            if found is not None and fnmatch.fnmatchcase(found, value):
                return True
        if self.patterns:
            said = text()[:TEXT_SEARCHED]
            return any(pattern.search(said) is not None for pattern in self.patterns)
        return False


def is_background(
    tool_choice: Any, background: Background, text: Callable[[], str], headers: Mapping[str, str]
) -> bool:
    """Whether a request gets no server tools: it asked for none, or a rule says it is
    a front-end's background task."""
    return tool_choice == "none" or (bool(background) and background.matches(text, headers))


def last_user_text(entries: Sequence[Any]) -> str:
    """The text of the last user message of a chat ``messages`` list or of Responses
    input items (a string, or the text of its parts)."""
    for entry in reversed(entries):
        if not isinstance(entry, dict) or entry.get("role") != "user":
            continue
        content = entry.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            texts = []
            size = 0
            for part in content:
                text = part.get("text") if isinstance(part, dict) else None
                if isinstance(text, str):
                    texts.append(text)
                    size += len(text)
                    if size >= TEXT_SEARCHED:
                        break
            return "".join(texts)
        return ""
    return ""
