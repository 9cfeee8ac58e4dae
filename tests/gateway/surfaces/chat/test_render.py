"""The completion a client receives for a loop: the gateway's answer, not the last
round's (docs/design.md §7)."""

from __future__ import annotations

from typing import Any

from gateway.engine.loop import Final, HandBack
from gateway.surfaces.chat.render import render_completion
from gateway.upstream.openai import codec as dialect
from gateway.values import ToolCall
from tests.support.schema import assert_valid_completion

SUMMED = {"prompt_tokens": 4852, "completion_tokens": 40, "total_tokens": 4892}


def upstream_answer(message: dict[str, Any], finish: str = "stop") -> dict[str, Any]:
    """A last round as llama.cpp's server sends it: sparse, with its own extras."""
    return {
        "id": "x",
        "created": 1,
        "model": "upstream-name",
        "system_fingerprint": "b1-abc",
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": {"prompt_tokens": 66, "completion_tokens": 8, "total_tokens": 74},
        "timings": {"prompt_n": 66, "predicted_n": 8},
    }


def test_the_answer_is_the_gateways_and_fills_what_openai_requires() -> None:
    raw = upstream_answer({"role": "assistant", "content": "hi", "tool_calls": []})
    final = Final(dialect.parse_completion(raw), "stop", dropped=False)
    done = render_completion([final], "client-name", SUMMED, "chatcmpl-abc", 1700000000)
    assert_valid_completion(done)
    assert (done["id"], done["created"], done["model"]) == (
        "chatcmpl-abc",
        1700000000,
        "client-name",
    )
    assert done["usage"] == SUMMED
    assert "timings" not in done  # per-round extras would contradict the sums
    assert done["system_fingerprint"] == "b1-abc"
    [choice] = done["choices"]
    assert choice["message"] == {"role": "assistant", "content": "hi", "refusal": None}
    assert (choice["finish_reason"], choice["logprobs"]) == ("stop", None)


def test_calls_the_client_does_not_see_leave_the_message() -> None:
    call = {"id": "t2", "type": "function", "function": {"name": "double", "arguments": "{}"}}
    raw = upstream_answer({"role": "assistant", "content": "x", "tool_calls": [call]}, "tool_calls")
    final = Final(dialect.parse_completion(raw), "stop", dropped=True)
    done = render_completion([final], "m", SUMMED, "chatcmpl-1", 1)
    assert_valid_completion(done)
    [choice] = done["choices"]
    assert "tool_calls" not in choice["message"]
    assert choice["finish_reason"] == "stop"


def test_a_hand_back_carries_only_the_clients_calls_and_each_choice_its_index() -> None:
    server = {"id": "s1", "type": "function", "function": {"name": "double", "arguments": "{}"}}
    client = {"id": "c1", "type": "function", "function": {"name": "ask", "arguments": "{}"}}
    message = {"role": "assistant", "content": None, "tool_calls": [server, client]}
    answer = dialect.parse_completion(upstream_answer(message, "tool_calls"))
    handed = HandBack((ToolCall("c1", "ask", "{}"),), answer)
    plain = Final(dialect.parse_completion(upstream_answer({"content": "no"})), "stop", False)
    done = render_completion([handed, plain], "m", SUMMED, "chatcmpl-2", 1)
    assert_valid_completion(done)
    first, second = done["choices"]
    assert first["message"]["tool_calls"] == [client]
    assert (first["index"], first["finish_reason"]) == (0, "tool_calls")
    assert (second["index"], second["message"]["content"]) == (1, "no")
