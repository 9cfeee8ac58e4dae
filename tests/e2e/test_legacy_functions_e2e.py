"""Old clients' ``functions`` / ``function_call`` (docs/design.md §10): with server tools in
play they are translated to tools on the way in and back on the way out, the client's
function handed back as ``function_call``, its ``role: "function"`` answer continuing
the loop with the hidden rounds put back (issue 10, item 3)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.support.fake_upstream import Reply, calls, say, tool_call, tool_results
from tests.support.schema import assert_valid, assert_valid_completion

from .conftest import ACME_KEY, MODEL, StackFactory

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
QUESTION = [{"role": "user", "content": "How long is 'hello', and how is the weather?"}]


def server_then_function(body: dict[str, Any]) -> Reply:
    """The server's tool first, then the client's function, then an answer of both."""
    assert "functions" not in body
    assert "function_call" not in body
    results = tool_results(body)
    if not results:
        return calls(tool_call("c_len", "string_length", {"s": "hello"}))
    if len(results) == 1:
        return calls(tool_call("model_picked_id", "get_weather", {"city": "Oslo"}))
    weather = next(v for k, v in results.items() if k != "c_len")
    return say(f"length {results['c_len']}, weather {weather}")


def _post(s: Any, body: dict[str, Any], key: str = ACME_KEY) -> httpx.Response:
    return httpx.post(
        f"{s.base_url}/chat/completions",
        json={"model": MODEL, **body},
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )


def _events(response: httpx.Response) -> list[dict[str, Any]]:
    lines = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def test_a_legacy_function_is_handed_back_and_its_answer_continues_the_loop(
    stack: StackFactory,
) -> None:
    s = stack(server_then_function)
    first = _post(s, {"messages": QUESTION, "functions": [WEATHER], "function_call": "auto"})
    assert first.status_code == 200, first.text
    assert_valid_completion(first.json())
    choice = first.json()["choices"][0]
    assert choice["finish_reason"] == "function_call"
    assert choice["message"]["function_call"] == {
        "name": "get_weather",
        "arguments": '{"city": "Oslo"}',
    }
    assert "tool_calls" not in choice["message"]
    asked = s.upstream.requests[0]
    assert {t["function"]["name"] for t in asked["tools"]} >= {"get_weather", "string_length"}
    assert asked["tool_choice"] == "auto"

    history = [
        *QUESTION,
        {"role": "assistant", "content": None, "function_call": choice["message"]["function_call"]},
        {"role": "function", "name": "get_weather", "content": "sunny"},
    ]
    final = _post(s, {"messages": history, "functions": [WEATHER]})
    assert final.status_code == 200, final.text
    assert final.json()["choices"][0]["message"]["content"] == "length 5, weather sunny"
    continued = s.upstream.requests[-1]["messages"]
    assert [m["role"] for m in continued] == ["user", "assistant", "tool", "assistant", "tool"]
    assert continued[3]["tool_calls"][0]["id"] == continued[4]["tool_call_id"]
    assert s.tools.paths() == ["/len"]  # the server tool ran once, in the first leg


def test_the_openai_sdk_legacy_functions_round_trip(stack: StackFactory) -> None:
    """As an old client written against ``functions`` calls it, with the stock SDK."""
    s = stack(server_then_function)
    client = s.client()
    first = client.chat.completions.create(
        model=MODEL,
        messages=QUESTION,  # type: ignore[arg-type]
        functions=[WEATHER],  # type: ignore[list-item]
    )
    message = first.choices[0].message
    assert first.choices[0].finish_reason == "function_call"
    assert message.function_call is not None
    assert message.function_call.name == "get_weather"
    history: Any = [
        *QUESTION,
        {
            "role": "assistant",
            "content": None,
            "function_call": message.function_call.model_dump(),
        },
        {"role": "function", "name": "get_weather", "content": "sunny"},
    ]
    final = client.chat.completions.create(
        model=MODEL,
        messages=history,
        functions=[WEATHER],  # type: ignore[list-item]
    )
    assert final.choices[0].message.content == "length 5, weather sunny"
    assert s.tools.paths() == ["/len"]


def test_a_legacy_function_streams_back_as_a_function_call(stack: StackFactory) -> None:
    s = stack(server_then_function)
    response = _post(s, {"messages": QUESTION, "functions": [WEATHER], "stream": True})
    assert response.status_code == 200, response.text
    events = _events(response)
    for event in events:
        assert_valid(event, "CreateChatCompletionStreamResponse")
    deltas = [e["choices"][0] for e in events if e["choices"]]
    calls_seen = [d["delta"]["function_call"] for d in deltas if "function_call" in d["delta"]]
    assert calls_seen == [{"name": "get_weather", "arguments": '{"city": "Oslo"}'}]
    assert [d["finish_reason"] for d in deltas if d["finish_reason"]] == ["function_call"]
    assert not any("tool_calls" in d["delta"] for d in deltas)


def test_a_named_function_call_is_a_named_tool_choice(stack: StackFactory) -> None:
    s = stack(server_then_function)
    _post(
        s, {"messages": QUESTION, "functions": [WEATHER], "function_call": {"name": "get_weather"}}
    )
    forced = {"type": "function", "function": {"name": "get_weather"}}
    assert [r["tool_choice"] for r in s.upstream.requests] == [forced, forced]


@pytest.mark.parametrize(
    ("field", "value"),
    [("functions", "x"), ("functions", [{"description": "no name"}]), ("function_call", 5)],
)
def test_a_malformed_legacy_field_is_a_400(stack: StackFactory, field: str, value: Any) -> None:
    s = stack(server_then_function)
    body: dict[str, Any] = {"messages": QUESTION, "functions": [WEATHER], field: value}
    response = _post(s, body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"].startswith(field)
    assert s.upstream.requests == []


def test_without_server_tools_legacy_requests_pass_through_as_they_came(
    stack: StackFactory,
) -> None:
    s = stack(lambda body: say("plain"))
    body = {"messages": QUESTION, "functions": [WEATHER], "function_call": "auto"}
    response = _post(s, {**body, "toolgate": {"tools": []}})
    assert response.status_code == 200, response.text
    sent = s.upstream.requests[-1]
    assert sent["functions"] == [WEATHER]
    assert sent["function_call"] == "auto"
    assert "tools" not in sent


def test_of_two_client_calls_at_once_the_first_is_handed_back(stack: StackFactory) -> None:
    """A legacy message holds one call: the second leaves the turn, and the history the
    upstream sees when the client returns holds no call without its answer."""

    def twice(body: dict[str, Any]) -> Reply:
        results = tool_results(body)
        if not results:
            return calls(
                tool_call("a", "string_length", {"s": "hi"}),
                tool_call("b", "get_weather", {"city": "Oslo"}),
                tool_call("c", "get_weather", {"city": "Rome"}),
            )
        return say("ok")

    s = stack(twice)
    first = _post(s, {"messages": QUESTION, "functions": [WEATHER]}).json()["choices"][0]
    assert first["message"]["function_call"]["arguments"] == '{"city": "Oslo"}'
    history = [
        *QUESTION,
        {"role": "assistant", "content": None, "function_call": first["message"]["function_call"]},
        {"role": "function", "name": "get_weather", "content": "sunny"},
    ]
    assert _post(s, {"messages": history, "functions": [WEATHER]}).status_code == 200
    continued = s.upstream.requests[-1]["messages"]
    asked = [c["id"] for m in continued if m["role"] == "assistant" for c in m["tool_calls"]]
    answered = [m["tool_call_id"] for m in continued if m["role"] == "tool"]
    assert sorted(asked) == sorted(answered)
    assert len(asked) == 2  # the server's call and the one handed back
