"""``stream: true`` through the tool loop, seen by the real ``openai`` SDK and on the wire."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionMessageParam

from tests.support.fake_upstream import Die, Reply, calls, say, tool_call, tool_results
from tests.support.schema import assert_valid, assert_valid_error
from tests.support.servers import wait_for

from .conftest import ACME_KEY, MODEL, Stack, StackFactory
from .test_seed_example import QUESTION, seed_script

USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": QUESTION}]


def wire(s: Stack, body: dict[str, Any], headers: dict[str, str] | None = None) -> list[Any]:
    """Every data event of a streamed answer, parsed and schema-checked."""
    events: list[Any] = []
    with httpx.stream(
        "POST",
        f"{s.base_url}/chat/completions",
        json={"model": MODEL, "messages": USER, "stream": True, **body},
        headers={"authorization": f"Bearer {ACME_KEY}", **(headers or {})},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                data = line.removeprefix("data: ")
                events.append(data if data == "[DONE]" else json.loads(data))
    for event in events:
        if isinstance(event, dict) and "error" not in event:
            assert_valid(event, "CreateChatCompletionStreamResponse")
    return events


def content_of(events: list[Any]) -> str:
    return "".join(
        e["choices"][0]["delta"].get("content") or ""
        for e in events
        if isinstance(e, dict) and e.get("choices")
    )


def test_the_seed_example_streams_only_the_final_answer(stack: StackFactory) -> None:
    s = stack(seed_script)
    plain = s.client().chat.completions.create(model=MODEL, messages=USER)
    events = wire(s, {"stream_options": {"include_usage": True}})

    chunks = [e for e in events if isinstance(e, dict)]
    assert events[-1] == "[DONE]"
    assert content_of(events) == plain.choices[0].message.content
    assert len({c["id"] for c in chunks}) == 1
    assert len({c["created"] for c in chunks}) == 1
    assert {c["model"] for c in chunks} == {MODEL}
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert sum("role" in d for d in deltas) == 1
    assert "role" in deltas[0]
    assert not any("tool_calls" in d for d in deltas)
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert [f for f in finishes if f] == ["stop"]
    assert finishes[-1] == "stop"
    usage = chunks[-1]
    assert usage["choices"] == []
    assert usage["usage"] == {"prompt_tokens": 40, "completion_tokens": 20, "total_tokens": 60}
    # Every round was streamed from upstream and asked for usage.
    streamed = s.upstream.requests[-4:]
    assert all(r["stream"] and r["stream_options"] == {"include_usage": True} for r in streamed)


def test_the_sdk_reads_the_stream(stack: StackFactory) -> None:
    s = stack(seed_script)
    stream = s.client().chat.completions.create(
        model=MODEL, messages=USER, stream=True, stream_options={"include_usage": True}
    )
    text, usage = "", None
    for chunk in stream:
        if chunk.choices:
            assert chunk.choices[0].delta.tool_calls is None
            text += chunk.choices[0].delta.content or ""
        if chunk.usage:
            usage = chunk.usage
    assert text == "The answer is 3.162."
    assert usage is not None
    assert usage.total_tokens == 60
    assert sorted(s.tools.paths()) == ["/add", "/len", "/len", "/sqrt"]


def test_content_is_not_buffered(stack: StackFactory) -> None:
    s = stack(lambda body: say("one two three four five"), word_delay_s=0.3)
    client = s.client(default_headers={"x-toolgate-max-iterations": "3"})
    stream = client.chat.completions.create(model=MODEL, messages=USER, stream=True)
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            assert chunk.choices[0].delta.content == "one "
            # The upstream is still between words: nothing waited for the round's end.
            assert s.upstream.streams_finished == 0
            break
    stream.close()


CLIENT_TOOL: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
}


def test_client_tool_calls_are_handed_back_in_the_stream(stack: StackFactory) -> None:
    s = stack(lambda body: calls(tool_call("w1", "get_weather", {"city": "Oslo"})))
    events = wire(s, {"tools": [CLIENT_TOOL]})
    deltas = [e["choices"][0] for e in events if isinstance(e, dict) and e["choices"]]
    (with_calls,) = [d for d in deltas if "tool_calls" in d["delta"]]
    assert with_calls["delta"]["tool_calls"] == [
        {
            "index": 0,
            "id": "w1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
        }
    ]
    assert [d["finish_reason"] for d in deltas if d["finish_reason"]] == ["tool_calls"]
    assert s.tools.hits == []


def test_the_forced_last_round_streams_too(stack: StackFactory) -> None:
    def greedy(body: dict[str, Any]) -> Reply:
        if "tools" not in body:
            return say("best effort answer")
        return calls(tool_call(f"c{len(body['messages'])}", "string_length", {"s": "abc"}))

    s = stack(greedy, limits={"max_iterations": 2})
    events = wire(s, {})
    assert content_of(events) == "best effort answer"
    assert ["tools" in r for r in s.upstream.requests] == [True, False]


def test_a_limit_before_anything_was_sent_is_an_http_error(stack: StackFactory) -> None:
    def greedy(body: dict[str, Any]) -> Reply:
        return calls(tool_call(f"c{len(body['messages'])}", "string_length", {"s": "a"}))

    s = stack(greedy, limits={"max_iterations": 2, "on_limit": "error"})
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        s.client().chat.completions.create(model=MODEL, messages=USER, stream=True)
    assert_valid_error(caught.value.response.json())
    assert caught.value.code == "tool_limit_exceeded"


def test_a_limit_after_the_stream_started_is_an_error_event(stack: StackFactory) -> None:
    def chatty(body: dict[str, Any]) -> Reply:
        message = calls(tool_call(f"c{len(body['messages'])}", "string_length", {"s": "a"}))
        return {**message, "content": "Let me look. "}

    s = stack(chatty, limits={"max_iterations": 2, "on_limit": "error"})
    events = wire(s, {})
    assert content_of(events) == "Let me look. \n\nLet me look. "  # two rounds' texts
    error = events[-1]
    assert_valid_error(error)
    assert error["error"]["code"] == "tool_limit_exceeded"
    assert "[DONE]" not in events
    stream = s.client().chat.completions.create(model=MODEL, messages=USER, stream=True)
    with pytest.raises(openai.APIError, match="max_iterations"):
        for _ in stream:
            pass


def _last_event(s: Stack, body: dict[str, Any]) -> str:
    """The last event of a streamed answer as it came on the wire (its field lines)."""
    with httpx.stream(
        "POST",
        f"{s.base_url}/chat/completions",
        json={"model": MODEL, "messages": USER, "stream": True, **body},
        headers={"authorization": f"Bearer {ACME_KEY}"},
        timeout=30,
    ) as response:
        text = response.read().decode()
    return text.strip().split("\n\n")[-1]


@pytest.mark.parametrize("tools", [True, False], ids=["tool-loop", "pass-through"])
def test_an_upstream_dying_mid_stream(stack: StackFactory, tools: bool) -> None:
    """The error ends the stream as a chunk holding ``error`` (the OpenAI SDKs raise on
    it) in an event named ``error`` (clients that read only named errors, LangChain4j's
    streaming chat among them, raise on that, where they would end as if finished)."""
    s = stack(lambda body: Die("alpha beta gamma delta", words=2))
    narrowed: dict[str, Any] = {} if tools else {"toolgate": {"tools": []}}
    events = wire(s, narrowed)
    assert content_of(events) == "alpha beta "
    assert_valid_error(events[-1])
    assert events[-1]["error"]["type"] == "upstream_error"
    event, data = _last_event(s, narrowed).split("\n")
    assert event == "event: error"
    assert json.loads(data.removeprefix("data: "))["error"]["type"] == "upstream_error"
    stream = s.client().chat.completions.create(
        model=MODEL, messages=USER, stream=True, extra_body=narrowed
    )
    with pytest.raises(openai.APIError):
        for _ in stream:
            pass


def test_an_upstream_dying_before_any_content_is_a_502(stack: StackFactory) -> None:
    s = stack(lambda body: Die("alpha beta", words=0))
    with pytest.raises(openai.InternalServerError) as caught:
        s.client().chat.completions.create(model=MODEL, messages=USER, stream=True)
    assert caught.value.status_code == 502


def test_an_upstream_without_usage(stack: StackFactory) -> None:
    s = stack(seed_script, send_usage=False)
    events = wire(s, {"stream_options": {"include_usage": True}})
    assert content_of(events) == "The answer is 3.162."
    assert not any(isinstance(e, dict) and "usage" in e for e in events)


def _leave_while_the_tool_runs(s: Stack) -> str:
    """Stream a request whose tool hangs, and leave (a Stop button) while it runs; the
    request's id."""
    with httpx.stream(
        "POST",
        f"{s.base_url}/chat/completions",
        json={"model": MODEL, "messages": USER, "stream": True},
        headers={"authorization": f"Bearer {ACME_KEY}"},
    ) as response:
        for line in response.iter_lines():
            if line.startswith(": keep-alive"):
                break  # the tool runs; leave mid-loop
    return response.headers["x-request-id"]


def test_a_client_that_disconnects_cancels_the_tools(stack: StackFactory) -> None:
    s = stack(lambda body: calls(tool_call("h1", "hang", {})))
    baseline = s.gateway.task_count()
    _leave_while_the_tool_runs(s)
    assert wait_for(lambda: s.tools.cancelled == 1), "the tool never saw its caller leave"
    assert s.tools.running == 0
    assert wait_for(lambda: s.gateway.task_count() <= baseline), (
        f"{s.gateway.task_count()} tasks left, {baseline} before"
    )


def test_a_stream_the_client_stops_is_logged_traced_and_counted_as_cancelled(
    stack: StackFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 34 §5: the Stop button of a chat UI was logged as a 200, its trace said 2
    iterations beside one round, with no mark. Now: 499, ``cancelled``, the round cut
    off named, what ran counted, and ``toolgate_requests_cancelled_total``."""
    s = stack(lambda body: calls(tool_call("h1", "hang", {})))
    caplog.set_level(logging.INFO, logger="gateway.access")
    request_id = _leave_while_the_tool_runs(s)
    assert wait_for(lambda: any(r.name == "gateway.access" for r in caplog.records))
    [line] = [r.toolgate for r in caplog.records if r.name == "gateway.access"]  # type: ignore[attr-defined]
    assert line["status"] == 499
    assert line["cancelled"] is True
    assert line["error"] == "client_closed_request"
    assert line["iterations"] == 1  # the round whose tool was running
    assert line["tool_calls"] == 1
    trace = httpx.get(
        f"{s.base_url}/toolgate/traces/{request_id}",
        headers={"authorization": f"Bearer {ACME_KEY}"},
    ).json()
    assert trace["status"] == 499
    assert trace["cancelled"] is True
    assert len(trace["rounds"]) == trace["iterations"] == 1
    metrics = httpx.get(f"{s.gateway.url}/metrics").text
    assert 'toolgate_requests_cancelled_total{tenant="acme"} 1.0' in metrics
    assert 'toolgate_requests_total{model="gpt-test",status="4xx",tenant="acme"} 1.0' in metrics


def _narrates_then_calls(body: dict[str, Any]) -> Reply:
    if tool_results(body):
        return say("It has 4 characters.")
    asked = calls(tool_call("c1", "string_length", {"s": "abcd"}))
    return {**asked, "content": "Let me check first."}


def test_the_texts_of_two_rounds_are_two_paragraphs(stack: StackFactory) -> None:
    """Issue 34 §6: "…first.It has 4 characters." read as one word in a chat UI."""
    s = stack(_narrates_then_calls)
    client = s.client()
    both = "Let me check first.\n\nIt has 4 characters."
    stream = client.chat.completions.create(model=MODEL, messages=USER, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == both
    deltas, done, completed = [], None, None
    for event in client.responses.create(model=MODEL, input="len abcd", stream=True):
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        elif event.type == "response.output_text.done":
            done = event.text
        elif event.type == "response.completed":
            completed = event.response.output_text
    assert "".join(deltas) == done == completed == both
    whole = client.chat.completions.create(model=MODEL, messages=USER)
    assert whole.choices[0].message.content == "It has 4 characters."  # the last round's


def test_pass_through_streams_with_the_clients_model_name(stack: StackFactory) -> None:
    s = stack(lambda body: say("plain words here"))
    for model in ("renamed", MODEL):
        events = wire(s, {"model": model}, headers={"x-toolgate-tools": ""})
        assert content_of(events) == "plain words here"
        assert {e["model"] for e in events if isinstance(e, dict)} == {model}
        assert events[-1] == "[DONE]"
    assert "tools" not in s.upstream.requests[-1]


def test_a_streamed_tool_round_keeps_the_upstreams_logprobs(stack: StackFactory) -> None:
    """Each content delta carries the logprobs the upstream sent with it, as without
    tools, and as the non-streamed answer's ``logprobs`` (issue 10, item 6)."""
    s = stack(seed_script)
    client = s.client()
    stream = client.chat.completions.create(model=MODEL, messages=USER, stream=True, logprobs=True)
    pieces = [c.choices[0] for c in stream if c.choices and c.choices[0].delta.content]
    assert pieces, "no content streamed"
    streamed = []
    for piece in pieces:
        assert piece.logprobs is not None
        tokens = [t.token for t in piece.logprobs.content or []]
        assert tokens == [piece.delta.content]
        streamed += tokens
    whole = client.chat.completions.create(model=MODEL, messages=USER, logprobs=True)
    assert whole.choices[0].logprobs is not None
    assert streamed == [t.token for t in whole.choices[0].logprobs.content or []]
    assert s.upstream.requests[-1]["logprobs"] is True
    wire(s, {"logprobs": True})  # every chunk still valid against the schema


def test_a_stream_ends_with_what_the_headers_would_say(stack: StackFactory) -> None:
    """A stream's headers go out before its rounds are counted: the counts, and the cap
    that forced the last round, come as SSE comment lines before its last events, and
    the SDK reads the stream as ever."""

    def greedy(body: dict[str, Any]) -> Reply:
        if "tools" not in body:
            return say("best effort answer")
        return calls(tool_call(f"c{len(body['messages'])}", "string_length", {"s": "abc"}))

    s = stack(greedy, limits={"max_iterations": 2})
    with httpx.stream(
        "POST",
        f"{s.base_url}/chat/completions",
        json={"model": MODEL, "messages": USER, "stream": True},
        headers={"authorization": f"Bearer {ACME_KEY}"},
        timeout=30,
    ) as response:
        assert "x-toolgate-iterations" not in response.headers
        lines = list(response.iter_lines())
    comments = [line for line in lines if line.startswith(": x-toolgate-")]
    assert comments == [
        ": x-toolgate-iterations: 2",
        ": x-toolgate-tool-calls: 1",
        ": x-toolgate-tool-calls-reused: 0",
        ": x-toolgate-stopped: max_iterations",
    ]
    assert lines.index(comments[-1]) < lines.index("data: [DONE]")
    chunks = s.client().chat.completions.create(model=MODEL, messages=USER, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        "best effort answer"
    )
