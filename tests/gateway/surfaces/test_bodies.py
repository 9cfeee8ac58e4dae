"""A request's body, once decoded, is nobody's to change (docs/design.md §10): every
surface's parsed body is read-only, and what the gateway sends instead (a restored
history, dropped tools, a renamed model) is a new value beside it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from gateway.surfaces.chat.legacy import from_functions
from gateway.surfaces.chat.request import parse_chat_request
from gateway.surfaces.responses.request import parse_responses_request
from tool_registry import dumps

CHAT = {
    "model": "m",
    "messages": [{"role": "user", "content": "hi"}],
    "functions": [{"name": "f", "parameters": {"type": "object"}}],
    "toolgate": {"tools": []},
}
RESPONSES = {
    "model": "m",
    "input": "hi",
    "tools": [{"type": "web_search"}, {"type": "function", "name": "f"}],
}


def assert_read_only(body: Mapping[str, Any]) -> None:
    with pytest.raises(TypeError):
        body["messages"] = []  # type: ignore[index]
    with pytest.raises(AttributeError):
        body.pop("model")  # type: ignore[attr-defined]


def test_every_parsed_body_is_read_only() -> None:
    chat = parse_chat_request(dumps(CHAT), {})
    assert_read_only(chat.body)
    assert "toolgate" not in chat.body
    translated = from_functions(chat)
    assert_read_only(translated.body)
    assert "functions" in chat.body  # the request as it came is left as it was
    assert "functions" not in translated.body
    responses = parse_responses_request(dumps(RESPONSES), {})
    assert_read_only(responses.body)
    assert len(responses.body["tools"]) == 2
