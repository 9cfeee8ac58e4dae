"""``n > 1`` with server tools (issue 10, item 5): one loop per choice, run at once,
within the request's caps, usage summed — streamed and not."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.support.fake_upstream import Reply, calls, say, tool_call, tool_results
from tests.support.schema import assert_valid, assert_valid_completion

from .conftest import ACME_KEY, MODEL, StackFactory

USER: Any = [{"role": "user", "content": "how long is 'hello'?"}]


def length_then_answer(body: dict[str, Any]) -> Reply:
    results = tool_results(body)
    if not results:
        return calls(tool_call("c1", "string_length", {"s": "hello"}))
    return say(f"it is {results['c1']} long")


def test_two_choices_each_run_their_loop(stack: StackFactory) -> None:
    s = stack(length_then_answer)
    raw = s.client().chat.completions.with_raw_response.create(model=MODEL, messages=USER, n=2)
    completion = raw.parse()
    assert_valid_completion(json.loads(raw.text))
    assert [c.index for c in completion.choices] == [0, 1]
    assert [c.message.content for c in completion.choices] == ["it is 5 long"] * 2
    assert len(s.upstream.requests) == 4  # two rounds per choice
    assert all("n" not in body for body in s.upstream.requests)
    assert s.tools.paths() == ["/len", "/len"]
    assert completion.usage is not None
    assert completion.usage.total_tokens == 4 * 15  # every round's usage, summed
    assert raw.headers["x-toolgate-iterations"] == "4"
    assert raw.headers["x-toolgate-tool-calls"] == "2"


def test_two_streamed_choices(stack: StackFactory) -> None:
    s = stack(length_then_answer)
    with httpx.stream(
        "POST",
        f"{s.base_url}/chat/completions",
        json={
            "model": MODEL,
            "messages": USER,
            "n": 2,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        headers={"authorization": f"Bearer {ACME_KEY}"},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        lines = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    events = [json.loads(line) for line in lines[:-1]]
    for event in events:
        assert_valid(event, "CreateChatCompletionStreamResponse")
    assert len({(e["id"], e["created"]) for e in events}) == 1
    for index in (0, 1):
        mine = [c for e in events for c in e["choices"] if c["index"] == index]
        assert sum(1 for c in mine if "role" in c["delta"]) == 1
        assert [c["finish_reason"] for c in mine if c["finish_reason"]] == ["stop"]
        text = "".join(c["delta"].get("content") or "" for c in mine)
        assert text == "it is 5 long"
    usage = [e["usage"] for e in events if e.get("usage")]
    assert len(usage) == 1
    assert usage[0]["total_tokens"] == 4 * 15


@pytest.mark.parametrize("stream", [False, True])
def test_the_choices_share_the_requests_caps(stack: StackFactory, stream: bool) -> None:
    """Two choices at once, one tool execution allowed: one runs, whichever decides
    first; and their rounds count against one max_iterations."""
    s = stack(length_then_answer)
    client = s.client(default_headers={"x-toolgate-max-tool-calls": "1"})
    if stream:
        chunks = list(client.chat.completions.create(model=MODEL, messages=USER, n=2, stream=True))
        finished = {c.choices[0].index for c in chunks if c.choices and c.choices[0].finish_reason}
        assert finished == {0, 1}
    else:
        completion = client.chat.completions.create(model=MODEL, messages=USER, n=2)
        assert len(completion.choices) == 2
    assert s.tools.paths() == ["/len"]  # one execution in all, as the cap says


@pytest.mark.parametrize("n", [0, -1, "2", 1000])
def test_an_n_the_caps_cannot_hold_is_a_400(stack: StackFactory, n: Any) -> None:
    s = stack(length_then_answer)
    with pytest.raises(openai.BadRequestError) as caught:
        s.client().chat.completions.create(model=MODEL, messages=USER, n=n)
    assert caught.value.param == "n"
    assert s.upstream.requests == []
