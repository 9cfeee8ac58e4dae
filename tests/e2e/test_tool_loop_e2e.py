"""The tool loop end to end: allowlists, caps, bad arguments, failing tools, parallelism,
bound arguments, client tools and narrowing, all seen through the real ``openai`` SDK."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import (
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageParam,
    ChatCompletionNamedToolChoiceParam,
)

from tests.support.fake_upstream import Reply, calls, say, tool_call, tool_results
from tests.support.schema import assert_valid_completion, assert_valid_error

from .conftest import ACME_KEY, MODEL, StackFactory

USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": "go"}]


def once(first: Reply, then: str = "done") -> Any:
    """A model that asks for ``first`` and then answers, quoting the tool results."""

    def script(body: dict[str, Any]) -> Reply:
        results = tool_results(body)
        if not results and "tools" in body:  # the last round offers none
            return first
        return say(then + " " + json.dumps(results, sort_keys=True))

    return script


def answered_results(s: Any) -> dict[str, str]:
    """The tool results the model was given in the last round."""
    return tool_results(s.upstream.requests[-1])


def test_tools_outside_the_allowlist_are_never_called(stack: StackFactory) -> None:
    s = stack(once(calls(tool_call("c1", "secret_admin", {}), tool_call("c2", "no_such", {}))))
    completion = s.client().chat.completions.create(model=MODEL, messages=USER)
    assert completion.choices[0].message.content is not None
    assert s.tools.hits == []
    results = answered_results(s)
    assert set(results) == {"c1", "c2"}
    for content in results.values():
        error = json.loads(content)["error"]
        assert "not available" in error
        assert "secret_admin" not in error  # names no tool the tenant cannot use
        assert "string_length" in error  # but says what is available


def test_final_answer_at_the_iteration_cap(stack: StackFactory) -> None:
    def greedy(body: dict[str, Any]) -> Reply:
        if "tools" not in body:
            return say("best effort")
        n = len(tool_results(body))
        return calls(tool_call(f"c{n}", "string_length", {"s": "x" * (n + 1)}))

    s = stack(greedy, limits={"max_iterations": 3, "on_limit": "final_answer"})
    raw = s.client().chat.completions.with_raw_response.create(model=MODEL, messages=USER)
    completion = raw.parse()
    assert_valid_completion(json.loads(raw.http_response.content))
    assert completion.choices[0].message.content == "best effort"
    assert completion.choices[0].finish_reason == "stop"
    assert len(s.upstream.requests) == 3
    # The last round offers no tools at all (not tools with tool_choice "none", which
    # some servers render into the prompt for the model to write a call as text).
    assert ["tools" in r for r in s.upstream.requests] == [True, True, False]
    assert [r.get("tool_choice") for r in s.upstream.requests] == [None, None, None]
    assert raw.headers["x-toolgate-iterations"] == "3"
    assert raw.headers["x-toolgate-stopped"] == "max_iterations"
    # The answer is the gateway's: its own id (the upstream's was "chatcmpl-x"), as a
    # stream's is.
    assert completion.id == "chatcmpl-" + raw.headers["x-request-id"].removeprefix("req_")
    assert len(s.tools.hits) == 2


@pytest.mark.parametrize("stream", [False, True])
def test_final_answer_drops_a_tool_call_that_still_comes_back(
    stack: StackFactory, stream: bool
) -> None:
    """A model that still only calls a tool in the forced last round (llama.cpp's
    Messages endpoint ignores ``tool_choice: none``): its call is dropped, and the
    client never gets an empty answer presented as a normal end (issue 62 §8)."""

    def stubborn(body: dict[str, Any]) -> Reply:
        return calls(tool_call(f"c{len(body['messages'])}", "string_length", {"s": "a"}))

    s = stack(stubborn, limits={"max_iterations": 2})
    if stream:
        chunks = list(s.client().chat.completions.create(model=MODEL, messages=USER, stream=True))
        deltas = [c.choices[0] for c in chunks if c.choices]
        text = "".join(d.delta.content or "" for d in deltas)
        finish = [d.finish_reason for d in deltas if d.finish_reason]
        assert not any(d.delta.tool_calls for d in deltas)
    else:
        completion = s.client().chat.completions.create(model=MODEL, messages=USER)
        text = completion.choices[0].message.content or ""
        finish = [completion.choices[0].finish_reason]
        assert completion.choices[0].message.tool_calls is None
    assert finish == ["length"]
    assert "No answer" in text
    assert "max_iterations" in text
    assert len(s.upstream.requests) == 2
    assert len(s.tools.hits) == 1


def test_tool_call_cap_spends_the_budget_then_forces_an_answer(stack: StackFactory) -> None:
    script = once(
        calls(*(tool_call(f"c{i}", "string_length", {"s": "x" * i}) for i in range(1, 4)))
    )
    s = stack(script, limits={"max_tool_calls": 2})
    completion = s.client().chat.completions.create(model=MODEL, messages=USER)
    assert completion.choices[0].message.content is not None
    assert len(s.tools.hits) == 2
    results = answered_results(s)
    assert (results["c1"], results["c2"]) == ("1", "2")
    assert "budget" in json.loads(results["c3"])["error"]
    assert "tools" not in s.upstream.requests[-1]


def test_error_mode_answers_422_tool_limit_exceeded(stack: StackFactory) -> None:
    def greedy(body: dict[str, Any]) -> Reply:
        return calls(tool_call(f"c{len(body['messages'])}", "string_length", {"s": "a"}))

    s = stack(greedy, limits={"max_iterations": 2, "on_limit": "error"})
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        s.client().chat.completions.create(model=MODEL, messages=USER)
    assert caught.value.status_code == 422
    body = caught.value.response.json()
    assert_valid_error(body)
    assert body["error"]["code"] == "tool_limit_exceeded"
    assert len(s.upstream.requests) == 2
    # Only GET tools ran: nothing stops the SDK from retrying.
    assert "x-should-retry" not in caught.value.response.headers


def test_no_retry_after_a_side_effecting_tool_ran(stack: StackFactory) -> None:
    def script(body: dict[str, Any]) -> Reply:
        return calls(tool_call(f"c{len(body['messages'])}", "create_ticket", {"title": "t"}))

    s = stack(script, limits={"max_iterations": 2, "on_limit": "error"})
    # A client whose retries the gateway cannot recognise: its write is not kept, and
    # a failure after it says not to retry.
    answer = httpx.post(
        f"{s.base_url}/chat/completions",
        json={"model": MODEL, "messages": USER},
        headers={"authorization": f"Bearer {ACME_KEY}"},
    )
    assert answer.status_code == 422
    assert answer.headers["x-should-retry"] == "false"
    assert [h.method for h in s.tools.hits] == ["POST"]
    # The SDK's retries are recognised (docs/design.md §16): its write is kept for them.
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        s.client().chat.completions.create(model=MODEL, messages=USER)
    assert "x-should-retry" not in caught.value.response.headers
    assert [h.method for h in s.tools.hits] == ["POST", "POST"]


def test_invalid_arguments_are_never_sent(stack: StackFactory) -> None:
    def script(body: dict[str, Any]) -> Reply:
        results = tool_results(body)
        if not results:
            return calls(
                tool_call("bad_type", "add", {"a": "seven", "b": 1}),
                tool_call("bad_json", "add", '{"a": 1, "b":'),
                tool_call("missing", "add", {"a": 1}),
            )
        if "fixed" not in results:
            return calls(tool_call("fixed", "add", {"a": "2", "b": "3"}))  # coerced
        return say(results["fixed"])

    s = stack(script)
    completion = s.client().chat.completions.create(model=MODEL, messages=USER)
    assert completion.choices[0].message.content == "5"
    assert [json.loads(h.body) for h in s.tools.hits] == [{"a": 2, "b": 3}]
    errors = {k: json.loads(v)["error"] for k, v in tool_results(s.upstream.requests[1]).items()}
    assert "$.a" in errors["bad_type"]
    assert "number" in errors["bad_type"]
    assert "not valid JSON" in errors["bad_json"]
    assert "'b' is a required property" in errors["missing"]


def test_tool_failures_reach_the_model_not_the_client(stack: StackFactory) -> None:
    s = stack(once(calls(tool_call("f", "fail", {}), tool_call("t", "slow_timeout", {"ms": 1000}))))
    completion = s.client().chat.completions.create(model=MODEL, messages=USER)
    assert completion.choices[0].finish_reason == "stop"
    results = {k: json.loads(v) for k, v in answered_results(s).items()}
    assert results["f"]["status"] == 500
    assert "HTTP 500" in results["f"]["error"]
    assert "database on fire" in results["f"]["body"]
    assert "timed out" in results["t"]["error"]


def test_parallel_calls_run_at_once(stack: StackFactory) -> None:
    s = stack(once(calls(*(tool_call(f"c{i}", "slow", {"ms": 400 + i}) for i in range(4)))))
    s.client().chat.completions.create(model=MODEL, messages=USER)
    assert s.tools.max_running == 4  # the tool server saw all four running at once
    # Results come back in the order of the calls.
    assert list(answered_results(s)) == ["c0", "c1", "c2", "c3"]


def test_max_parallel_tools_bounds_concurrency(stack: StackFactory) -> None:
    s = stack(
        once(calls(*(tool_call(f"c{i}", "slow", {"ms": 100 + i}) for i in range(5)))),
        limits={"max_parallel_tools": 2},
    )
    s.client().chat.completions.create(model=MODEL, messages=USER)
    assert len(s.tools.hits) == 5
    assert s.tools.max_running == 2


def test_identical_calls_run_once(stack: StackFactory) -> None:
    s = stack(
        once(
            calls(
                tool_call("c1", "string_length", {"s": "hello"}),
                tool_call("c2", "string_length", {"s": "hello"}),
            )
        )
    )
    s.client().chat.completions.create(model=MODEL, messages=USER)
    assert len(s.tools.hits) == 1
    results = answered_results(s)
    assert results["c1"] == "5"
    assert results["c2"].startswith("5\n")
    assert "same call as c1" in results["c2"]


def test_bound_arguments_come_from_the_gateway(stack: StackFactory) -> None:
    s = stack(once(calls(tool_call("c1", "lookup", {"customer": "a/b", "tenant": "evil"}))))
    client = s.client(default_headers={"x-toolgate-user": "alice"})
    client.chat.completions.create(model=MODEL, messages=USER)
    (hit,) = s.tools.hits
    assert hit.raw_path == "/echo/acme/customers/a%2Fb"
    assert hit.headers["x-acting-user"] == "alice"
    lookup = next(t for t in s.upstream.requests[0]["tools"] if t["function"]["name"] == "lookup")
    assert set(lookup["function"]["parameters"]["properties"]) == {"customer"}
    assert lookup["function"]["parameters"]["required"] == ["customer"]


def test_a_missing_bound_header_is_an_error_result(stack: StackFactory) -> None:
    s = stack(once(calls(tool_call("c1", "lookup", {"customer": "42"}))))
    s.client().chat.completions.create(model=MODEL, messages=USER)
    assert s.tools.hits == []
    assert "x-toolgate-user" in json.loads(answered_results(s)["c1"])["error"]


CLIENT_TOOL: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
}


def test_client_tool_calls_go_back_to_the_client(stack: StackFactory) -> None:
    s = stack(lambda body: calls(tool_call("w1", "get_weather", {"city": "Oslo"})))
    raw = s.client().chat.completions.with_raw_response.create(
        model=MODEL,
        messages=USER,
        tools=[CLIENT_TOOL],
    )
    assert_valid_completion(json.loads(raw.http_response.content))
    completion = raw.parse()
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    assert [c.id for c in choice.message.tool_calls] == ["w1"]
    names = {t["function"]["name"] for t in s.upstream.requests[0]["tools"]}
    assert {"get_weather", "string_length"} <= names
    assert s.tools.hits == []


def shadowed_script(body: dict[str, Any]) -> Reply:
    """Calls ``add`` once, then says what it got back."""
    results = tool_results(body)
    if not results:
        return calls(tool_call("a1", "add", {"a": 1, "b": 2}))
    return say(f"got {results['a1']}")


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_tool_named_like_a_server_tool_wins(stack: StackFactory, stream: bool) -> None:
    """A client knowing nothing of the tenant's tools defines its own ``add``: the call
    is handed back to it, the server's ``add`` never runs, and a header says so
    (issue 10, item 4)."""
    s = stack(shadowed_script)
    mine: ChatCompletionFunctionToolParam = {
        "type": "function",
        "function": {"name": "add", "parameters": {"type": "object", "properties": {}}},
    }
    client = s.client()
    options: Any = {"model": MODEL, "messages": USER, "tools": [mine]}
    if stream:
        with client.chat.completions.with_streaming_response.create(stream=True, **options) as raw:
            header = raw.headers.get("x-toolgate-shadowed-tools")
            chunks = list(raw.parse())
        handed = [
            tc.function.name
            for c in chunks
            if c.choices
            for tc in c.choices[0].delta.tool_calls or []
            if tc.function
        ]
    else:
        raw_answer = client.chat.completions.with_raw_response.create(**options)
        header = raw_answer.headers.get("x-toolgate-shadowed-tools")
        message = raw_answer.parse().choices[0].message
        handed = [tc.function.name for tc in message.tool_calls or []]
    assert handed == ["add"]
    assert header == "add"
    first = s.upstream.requests[0]
    offered = [t["function"] for t in first["tools"]]
    assert [t["name"] for t in offered].count("add") == 1
    assert {"type": "object", "properties": {}} in [t.get("parameters") for t in offered]
    assert s.tools.paths() == []  # the server's add never ran


def test_a_request_without_a_shadowed_name_says_nothing_of_it(stack: StackFactory) -> None:
    s = stack(shadowed_script)
    raw = s.client().chat.completions.with_raw_response.create(model=MODEL, messages=USER)
    assert "x-toolgate-shadowed-tools" not in raw.headers
    assert raw.parse().choices[0].message.content == "got 3"  # the server's add ran


def test_tool_choice_forcing_a_tool_applies_to_the_first_round_only(stack: StackFactory) -> None:
    s = stack(once(calls(tool_call("c1", "string_length", {"s": "ab"}))))
    forced: ChatCompletionNamedToolChoiceParam = {
        "type": "function",
        "function": {"name": "string_length"},
    }
    s.client().chat.completions.create(
        model=MODEL,
        messages=USER,
        tool_choice=forced,
        response_format={"type": "json_object"},
        temperature=0.25,
    )
    first, second = s.upstream.requests
    assert first["tool_choice"] == forced
    assert second["tool_choice"] == "auto"
    for body in (first, second):
        assert body["response_format"] == {"type": "json_object"}
        assert body["temperature"] == 0.25


WEATHER: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
}


def server_then_client(body: dict[str, Any]) -> Reply:
    """A server tool first; then the client's tool if it may, else an answer."""
    if not tool_results(body):
        return calls(tool_call("c1", "string_length", {"s": "ab"}))
    names = [t["function"]["name"] for t in body.get("tools", [])]
    if "get_weather" in names and body.get("tool_choice") != "auto":
        return calls(tool_call("w1", "get_weather", {}))
    return say("no tool needed")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "choice",
    ["required", {"type": "function", "function": {"name": "get_weather"}}],
    ids=["required", "named-client-tool"],
)
def test_a_demanded_client_tool_call_stays_demanded_after_a_hidden_round(
    stack: StackFactory, choice: Any, stream: bool
) -> None:
    """The AI SDK and pydantic-ai send ``required`` and fail on text: every round keeps
    it while the client has tools of its own (issue 10, item 2)."""
    s = stack(server_then_client)
    options: Any = {"model": MODEL, "messages": USER, "tools": [WEATHER], "tool_choice": choice}
    if stream:
        chunks = list(s.client().chat.completions.create(stream=True, **options))
        handed = [
            tc.function.name
            for c in chunks
            if c.choices
            for tc in c.choices[0].delta.tool_calls or []
        ]
        finish = [
            c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
        ]
    else:
        answer = s.client().chat.completions.create(**options)
        handed = [tc.function.name for tc in answer.choices[0].message.tool_calls or []]
        finish = [answer.choices[0].finish_reason]
    assert handed == ["get_weather"]
    assert finish == ["tool_calls"]
    assert [r.get("tool_choice") for r in s.upstream.requests] == [choice, choice]
    assert s.tools.paths() == ["/len"]


def test_required_without_client_tools_is_met_by_the_first_round(stack: StackFactory) -> None:
    s = stack(server_then_client)
    answer = s.client().chat.completions.create(model=MODEL, messages=USER, tool_choice="required")
    assert answer.choices[0].message.content == "no tool needed"
    assert [r.get("tool_choice") for r in s.upstream.requests] == ["required", "auto"]


def test_requests_narrow_tools_and_iterations(stack: StackFactory) -> None:
    s = stack(once(calls(tool_call("c1", "add", {"a": 1, "b": 1}))))
    client = s.client(default_headers={"x-toolgate-max-iterations": "2"})
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=USER, extra_body={"toolgate": {"tools": ["string_length"]}}
    )
    content = raw.parse().choices[0].message.content
    assert content is not None
    assert content.startswith('done {"c1"')
    first, last = s.upstream.requests
    assert [t["function"]["name"] for t in first["tools"]] == ["string_length"]
    assert "tools" not in last  # two iterations: the second is the last
    assert raw.headers["x-toolgate-stopped"] == "max_iterations"
    assert "toolgate" not in first
    assert "toolgate" not in last
    assert "not available" in json.loads(answered_results(s)["c1"])["error"]
    assert s.tools.hits == []


def test_narrowing_to_a_tool_the_tenant_may_not_use_is_refused(stack: StackFactory) -> None:
    s = stack()
    client = s.client(default_headers={"x-toolgate-tools": "string_length,secret_admin"})
    with pytest.raises(openai.PermissionDeniedError) as caught:
        client.chat.completions.create(model=MODEL, messages=USER)
    assert_valid_error(caught.value.response.json())
    assert caught.value.code == "tool_not_allowed"


def test_no_server_tools_in_play_is_a_plain_pass_through(stack: StackFactory) -> None:
    s = stack(lambda body: say("plain"))
    client = s.client(default_headers={"x-toolgate-tools": ""})
    raw = client.chat.completions.with_raw_response.create(model="renamed", messages=USER)
    completion = raw.parse()
    assert completion.choices[0].message.content == "plain"
    assert completion.model == "renamed"
    (sent,) = s.upstream.requests
    assert sent["model"] == "upstream-name"
    assert "tools" not in sent
    assert raw.headers["x-request-id"].startswith("req_")


def test_model_is_renamed_upstream_and_restored_for_the_client(stack: StackFactory) -> None:
    s = stack(once(calls(tool_call("c1", "string_length", {"s": "ab"}))))
    completion = s.client().chat.completions.create(model="renamed", messages=USER)
    assert completion.model == "renamed"
    assert {r["model"] for r in s.upstream.requests} == {"upstream-name"}


def test_request_timeout_cuts_tools_then_forces_an_answer(stack: StackFactory) -> None:
    s = stack(
        once(calls(tool_call("s1", "slow", {"ms": 3000}))),
        limits={"request_timeout_s": 0.5},
    )
    completion = s.client().chat.completions.create(model=MODEL, messages=USER)
    assert completion.choices[0].finish_reason == "stop"
    # The 3 s tool was cut: its result is the budget's word, not its answer.
    assert "time budget" in json.loads(answered_results(s)["s1"])["error"]
    assert "tools" not in s.upstream.requests[-1]


def test_request_timeout_in_error_mode_is_422(stack: StackFactory) -> None:
    s = stack(
        once(calls(tool_call("s1", "slow", {"ms": 3000}))),
        limits={"request_timeout_s": 0.5, "on_limit": "error"},
    )
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        s.client().chat.completions.create(model=MODEL, messages=USER)
    assert caught.value.code == "tool_limit_exceeded"
    assert "request_timeout_s" in caught.value.message


def test_an_upstream_slower_than_the_request_timeout_is_504(stack: StackFactory) -> None:
    s = stack(lambda body: say("late"), limits={"request_timeout_s": 0.3}, delay_s=1.0)
    with pytest.raises(openai.InternalServerError) as caught:
        s.client().chat.completions.create(model=MODEL, messages=USER)
    assert caught.value.status_code == 504
    assert caught.value.code == "request_timeout"
    assert_valid_error(caught.value.response.json())


def test_a_stream_slower_than_the_request_timeout_ends_in_its_error(stack: StackFactory) -> None:
    """Each chunk of a streamed round is waited for within the request's deadline: a
    stream that outlasts it ends in the timeout's error event, after the words that
    came in time."""
    words = " ".join(f"w{i}" for i in range(8))
    s = stack(lambda body: say(words), limits={"request_timeout_s": 0.5}, word_delay_s=0.3)
    seen: list[str] = []

    def read() -> None:
        stream = s.client().chat.completions.create(model=MODEL, messages=USER, stream=True)
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                seen.append(chunk.choices[0].delta.content)

    with pytest.raises(openai.APIError) as caught:
        read()
    assert "request_timeout_s" in caught.value.message
    assert len("".join(seen).split()) < 8  # cut before its end
