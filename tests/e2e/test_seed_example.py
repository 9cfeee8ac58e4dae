"""The seed example: sqrt(len("hello") + len("world")) through three tool rounds."""

from __future__ import annotations

import json
import math
from typing import Any

from tests.support.fake_upstream import Reply, calls, say, tool_call, tool_results
from tests.support.schema import assert_valid_completion

from .conftest import MODEL, StackFactory

QUESTION = "What is the square root of the sum of the lengths of 'hello' and 'world'?"


def seed_script(body: dict[str, Any]) -> Reply:
    """A model that plans the computation and reads every tool result it is given."""
    results = tool_results(body)
    if not results:
        return calls(
            tool_call("call_len1", "string_length", {"s": "hello"}),
            tool_call("call_len2", "string_length", {"s": "world"}),
        )
    if "call_add" not in results:
        a, b = float(results["call_len1"]), float(results["call_len2"])
        return calls(tool_call("call_add", "add", {"a": a, "b": b}))
    if "call_sqrt" not in results:
        return calls(tool_call("call_sqrt", "sqrt", {"x": float(results["call_add"])}))
    return say(f"The answer is {float(results['call_sqrt']):.3f}.")


def test_seed_example_returns_only_the_final_answer(stack: StackFactory) -> None:
    s = stack(seed_script)
    raw = s.client().chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": QUESTION}]
    )
    completion = raw.parse()
    body = json.loads(raw.http_response.content)
    assert_valid_completion(body)

    assert completion.choices[0].message.content == f"The answer is {math.sqrt(10):.3f}."
    assert completion.choices[0].finish_reason == "stop"
    assert completion.choices[0].message.tool_calls is None
    assert completion.model == MODEL
    # Four upstream rounds of 10 + 5 tokens each, summed.
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (40, 20)
    assert completion.usage.total_tokens == 60
    assert raw.headers["x-toolgate-iterations"] == "4"
    assert raw.headers["x-toolgate-tool-calls"] == "4"
    assert raw.headers["x-request-id"].startswith("req_")

    assert sorted(s.tools.paths()) == ["/add", "/len", "/len", "/sqrt"]
    assert json.loads(s.tools.hits[-1].body or b"null") is None  # sqrt is a GET
    add_hit = next(h for h in s.tools.hits if h.path == "/add")
    assert json.loads(add_hit.body) == {"a": 5, "b": 5}

    # Each round carried the tool definitions and the growing history.
    rounds = s.upstream.requests
    assert [len(r["messages"]) for r in rounds] == [1, 4, 6, 8]
    assert {t["function"]["name"] for t in rounds[0]["tools"]} >= {"string_length", "add"}
    assert "secret_admin" not in {t["function"]["name"] for t in rounds[0]["tools"]}
    second = rounds[1]["messages"]
    assert second[1]["role"] == "assistant"
    assert len(second[1]["tool_calls"]) == 2
    assert [(m["tool_call_id"], m["content"]) for m in second[2:]] == [
        ("call_len1", "5"),
        ("call_len2", "5"),
    ]
    # The client's key never goes upstream; the upstream's does.
    assert {h["authorization"] for h in s.upstream.headers} == {"Bearer sk-upstream"}
