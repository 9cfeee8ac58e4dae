"""A user's token never reaches the model, whole or in part (issue 47 §3).

A careless service echoes the token it was sent. The token is registered with the call's
redactor before its result is read, so it is replaced as it is, JSON-escaped (a token
with ``"`` or ``\\`` echoed inside JSON) and where the result is cut at ``max_chars``
in the middle of it."""

from __future__ import annotations

import json
import secrets
from typing import Any

import pytest

from tests.e2e.test_connect_e2e import ToolStack
from tests.support.scripted import Harness

RANDOM = secrets.token_urlsafe(48)
TOKEN = 'at-"quoted"-\\back\\-' + RANDOM


class EchoStack(ToolStack):
    """The provider grants ``TOKEN``; ``my_repos`` answers with what it was sent, its
    result cut at ``max_chars``."""

    def __init__(self, harness: Harness, max_chars: int) -> None:
        self._max_chars = max_chars
        super().__init__(harness)
        self.oauth.token_answer = {
            "access_token": TOKEN,
            "token_type": "Bearer",
            "expires_in": 3600,
        }

    def _data(self, data: dict[str, Any]) -> dict[str, Any]:
        data = super()._data(data)
        data["tools"][0]["result"] = {"max_chars": self._max_chars}
        return data


def _pieces(text: str, size: int = 6) -> set[str]:
    return {text[i : i + size] for i in range(len(text) - size + 1)}


@pytest.mark.parametrize(
    "max_chars",
    [
        16000,  # whole
        len('{"authorization":"Bearer ') + 30,  # cut inside the token
        len('{"authorization":"Bearer ') + 4,  # cut right after its first characters
    ],
    ids=["whole", "cut-inside", "cut-early"],
)
def test_an_echoed_token_reaches_the_model_in_no_form(harness: Harness, max_chars: int) -> None:
    stack = EchoStack(harness, max_chars)
    stack.browse(stack.ask().headers["x-toolgate-connect"])
    answer = stack.ask()
    [hit] = stack.service.hits
    assert hit.headers["authorization"] == f"Bearer {TOKEN}"  # it was sent the token
    read = json.dumps(stack.model.requests[-1])  # everything the model was fed
    escaped = json.dumps(TOKEN)[1:-1]
    for text in (read, answer.text):
        assert TOKEN not in text
        assert escaped not in text
        assert not _pieces(RANDOM) & _pieces(text), "a part of the token reached the model"
    [content] = [m["content"] for m in stack.model.requests[-1]["messages"] if m["role"] == "tool"]
    shown = content.removeprefix('{"authorization":"Bearer ').partition("…")[0]
    assert "[redacted]".startswith(shown.removesuffix('"}')), content  # the mark, or its start
