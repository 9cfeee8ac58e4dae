"""The legacy functions shape, translated without HTTP."""

from __future__ import annotations

from gateway.surfaces.chat.legacy import call_id, from_functions, to_function_call, uses_functions
from gateway.surfaces.chat.request import parse_chat_request
from tool_registry.jsonio import dumps


def test_a_legacy_history_becomes_tool_calls_with_ids_from_their_place() -> None:
    body = {
        "model": "m",
        "functions": [{"name": "f", "parameters": {}}],
        "function_call": {"name": "f"},
        "messages": [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": None,
                "function_call": {"name": "f", "arguments": "{}"},
            },
            {"role": "function", "name": "f", "content": "one"},
            {"role": "assistant", "content": None, "function_call": {"name": "f"}},
            {"role": "function", "name": "f", "content": "two"},
        ],
    }
    assert uses_functions(body)
    chat = from_functions(parse_chat_request(dumps(body), {}))
    messages = chat.body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "tool"]
    assert messages[1]["tool_calls"][0]["id"] == call_id(1) == messages[2]["tool_call_id"]
    assert messages[3]["tool_calls"][0]["id"] == call_id(3) == messages[4]["tool_call_id"]
    assert messages[3]["tool_calls"][0]["function"]["arguments"] == "{}"
    assert "functions" not in chat.body
    assert chat.body["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert chat.client_tool_names == frozenset({"f"})
    assert chat.changed


def test_a_modern_request_is_not_legacy() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": []}
    assert not uses_functions(body)


def test_a_handed_back_call_goes_back_as_a_function_call() -> None:
    call = {"id": "x", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    completion = {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "tool_calls": [call]},
                "finish_reason": "tool_calls",
            }
        ]
    }
    choice = to_function_call(completion)["choices"][0]
    assert choice["message"] == {
        "role": "assistant",
        "function_call": {"name": "f", "arguments": "{}"},
    }
    assert choice["finish_reason"] == "function_call"
