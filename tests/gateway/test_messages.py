from __future__ import annotations

from typing import Any

import pytest

from gateway.errors import UpstreamError
from gateway.messages import assistant_turn, finalize, keep_calls, tool_calls_of
from tests.support.schema import assert_valid_completion


def test_finalize_fills_what_openai_requires() -> None:
    sparse: dict[str, Any] = {
        "id": "c1",
        "created": 1,
        "model": "upstream-name",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "hi", "tool_calls": []},
            }
        ],
    }
    done = finalize(
        sparse, "client-name", {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    )
    assert_valid_completion(done)
    assert done["model"] == "client-name"
    assert "tool_calls" not in done["choices"][0]["message"]


def test_assistant_turn_keeps_only_portable_fields() -> None:
    message = {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "reasoning_content": "thinking...",
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": ""}}],
    }
    assert assistant_turn(message) == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }


def test_keep_calls() -> None:
    response: dict[str, Any] = {
        "choices": [{"message": {"tool_calls": [1, 2]}, "finish_reason": "x"}]
    }
    keep_calls(response, [])
    assert response["choices"][0] == {"message": {}, "finish_reason": "stop"}


@pytest.mark.parametrize("calls", ["oops", [1], [{"function": "f"}]])
def test_malformed_tool_calls_are_the_upstreams_fault(calls: Any) -> None:
    with pytest.raises(UpstreamError):
        tool_calls_of({"tool_calls": calls})


def test_object_arguments_become_json_text() -> None:
    message = {"tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {"x": 1}}}]}
    turn = assistant_turn(message)
    assert turn["tool_calls"][0]["function"]["arguments"] == '{"x":1}'  # compact, as sent
