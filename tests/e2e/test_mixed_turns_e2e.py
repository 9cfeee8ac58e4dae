"""One assistant message asking for server and client tools (docs/design.md §6): the server
side runs and is saved, the client gets its calls only, and its return — on the same
replica or another — continues with the server's results put back."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionMessageParam

from gateway import GatewayConfig, create_app
from tests.support.fake_tools import FakeTools
from tests.support.fake_upstream import FakeUpstream, Reply, calls, say, tool_call, tool_results
from tests.support.servers import ServerThread

from .conftest import ACME_KEY, BETA_KEY, MODEL, StackFactory, gateway_config

WEATHER: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
}
QUESTION: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "How long is 'hello', and how is the weather?"}
]


def mixed(body: dict[str, Any]) -> Reply:
    """Asks for a server tool and a client tool at once; answers from both results."""
    results = tool_results(body)
    if not results:
        return calls(
            tool_call("c_len", "string_length", {"s": "hello"}),
            tool_call("w1", "get_weather", {"city": "Oslo"}),
        )
    return say(f"length {results.get('c_len', '?')}, weather {results.get('w1', '?')}")


def first_leg(client: openai.OpenAI, stream: bool = False) -> list[ChatCompletionMessageParam]:
    """The first request; returns the history the client sends back."""
    if stream:
        chunks = list(
            client.chat.completions.create(
                model=MODEL, messages=QUESTION, tools=[WEATHER], stream=True
            )
        )
        deltas = [c.choices[0] for c in chunks if c.choices]
        calls_seen = [tc for d in deltas for tc in d.delta.tool_calls or []]
        assert [f.finish_reason for f in deltas if f.finish_reason] == ["tool_calls"]
        assert [tc.id for tc in calls_seen] == ["w1"]
        call = {
            "id": "w1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
        }
    else:
        completion = client.chat.completions.create(model=MODEL, messages=QUESTION, tools=[WEATHER])
        message = completion.choices[0].message
        assert completion.choices[0].finish_reason == "tool_calls"
        assert [c.id for c in message.tool_calls or []] == ["w1"]  # the server call is hidden
        call = message.tool_calls[0].model_dump()  # type: ignore[index]
    return [
        *QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [call]},  # type: ignore[list-item]
        {"role": "tool", "tool_call_id": "w1", "content": "sunny"},
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_a_mixed_turn_on_one_gateway(stack: StackFactory, stream: bool) -> None:
    s = stack(mixed)
    history = first_leg(s.client(), stream)
    assert s.tools.paths() == ["/len"]
    final = s.client().chat.completions.create(model=MODEL, messages=history, tools=[WEATHER])
    assert final.choices[0].message.content == "length 5, weather sunny"
    assert s.tools.paths() == ["/len"]  # the server tool ran once, in the first leg
    continued = s.upstream.requests[-1]["messages"]
    assert [m["role"] for m in continued] == ["user", "assistant", "tool", "tool"]
    assert [c["id"] for c in continued[1]["tool_calls"]] == ["c_len", "w1"]
    assert [m["tool_call_id"] for m in continued[2:]] == ["c_len", "w1"]


def test_another_tenant_cannot_continue_the_turn(stack: StackFactory) -> None:
    s = stack(mixed, config=lambda c: _beta_may_call(c))
    history = first_leg(s.client())
    s.client(BETA_KEY).chat.completions.create(model=MODEL, messages=history, tools=[WEATHER])
    continued = s.upstream.requests[-1]["messages"]
    assert [m["role"] for m in continued] == ["user", "assistant", "tool"]  # nothing restored


def _beta_may_call(config: dict[str, Any]) -> dict[str, Any]:
    config["tenants"][1]["models"] = ["*"]
    return config


def test_an_expired_turn_continues_without_it_and_is_counted(stack: StackFactory) -> None:
    def short(config: dict[str, Any]) -> dict[str, Any]:
        config["store"] = {"turn_ttl_s": 0.2}
        return config

    s = stack(mixed, config=short)
    history = first_leg(s.client())
    time.sleep(0.4)
    final = s.client().chat.completions.create(model=MODEL, messages=history, tools=[WEATHER])
    assert final.choices[0].message.content == "length ?, weather sunny"
    assert s.app.state.gateway.turns.misses == 1


def one_at_a_time(body: dict[str, Any]) -> Reply:
    """A model that calls one tool per message (``parallel_tool_calls: false``): the
    server's, then the client's, then answers from both results."""
    results = tool_results(body)
    if not results:
        return calls(tool_call("c_len", "string_length", {"s": "hello"}))
    if "w1" not in results:
        return calls(tool_call("w1", "get_weather", {"city": "Oslo"}))
    return say(f"length {results.get('c_len', '?')}, weather {results['w1']}")


def sequential_first_leg(client: openai.OpenAI, stream: bool) -> list[ChatCompletionMessageParam]:
    options: Any = {"model": MODEL, "messages": QUESTION, "tools": [WEATHER]}
    options["parallel_tool_calls"] = False
    if stream:
        chunks = list(client.chat.completions.create(stream=True, **options))
        handed = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
        assert [tc.id for tc in handed] == ["w1"]
    else:
        message = client.chat.completions.create(**options).choices[0].message
        assert [c.id for c in message.tool_calls or []] == ["w1"]
    call = {
        "id": "w1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
    }
    return [
        *QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [call]},  # type: ignore[list-item]
        {"role": "tool", "tool_call_id": "w1", "content": "sunny"},
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_a_hidden_round_before_a_hand_back_is_put_back(stack: StackFactory, stream: bool) -> None:
    """Round 1 runs a server tool, round 2 asks for the client's: when the client
    returns, the upstream sees the server call and its result too, and the tool is not
    run again (issue 10, item 1)."""
    s = stack(one_at_a_time)
    history = sequential_first_leg(s.client(), stream)
    final = s.client().chat.completions.create(model=MODEL, messages=history, tools=[WEATHER])
    assert final.choices[0].message.content == "length 5, weather sunny"
    assert s.tools.paths() == ["/len"]  # once, in the first leg
    continued = s.upstream.requests[-1]["messages"]
    assert [m["role"] for m in continued] == ["user", "assistant", "tool", "assistant", "tool"]
    assert [c["id"] for c in continued[1]["tool_calls"]] == ["c_len"]
    assert [c["id"] for c in continued[3]["tool_calls"]] == ["w1"]
    # The next turn resends the same history: the hidden round is put back again.
    s.client().chat.completions.create(model=MODEL, messages=history, tools=[WEATHER])
    assert s.upstream.requests[-1]["messages"] == continued


@pytest.fixture
def replicas(
    redis_url: str, redis_prefix: str
) -> Iterator[tuple[FakeUpstream, FakeTools, list[str]]]:
    """Two gateway replicas sharing one Redis, one fake upstream and one tool server."""
    upstream, tools = FakeUpstream(_either), FakeTools()
    with ServerThread(upstream.app()) as up, ServerThread(tools.app()) as tl:
        config = gateway_config(up.url, tl.url)
        # timeout_s: a new replica's first call connects, which on a loaded machine can
        # pass the 0.1 s default; this test is about the turn, not the store's timeout.
        prefix = f"{redis_prefix}{uuid.uuid4().hex[:8]}:"
        config["store"] = {"url": redis_url, "prefix": prefix, "timeout_s": 2.0}
        apps = [create_app(GatewayConfig.model_validate(config)) for _ in range(2)]
        with ServerThread(apps[0]) as a, ServerThread(apps[1]) as b:
            yield upstream, tools, [f"{a.url}/v1", f"{b.url}/v1"]


def test_a_mixed_turn_continued_on_another_replica(
    replicas: tuple[FakeUpstream, FakeTools, list[str]],
) -> None:
    upstream, tools, urls = replicas
    with (
        openai.OpenAI(base_url=urls[0], api_key=ACME_KEY, max_retries=0) as first,
        openai.OpenAI(base_url=urls[1], api_key=ACME_KEY, max_retries=0) as second,
    ):
        history = first_leg(first)
        final = second.chat.completions.create(model=MODEL, messages=history, tools=[WEATHER])
    assert final.choices[0].message.content == "length 5, weather sunny"
    assert tools.paths() == ["/len"]
    assert json.dumps(upstream.requests[-1]["messages"]).count('"c_len"') == 2


def test_cached_results_are_per_tenant(stack: StackFactory) -> None:
    def script(body: dict[str, Any]) -> Reply:
        if tool_results(body):
            return say("ok")
        return calls(tool_call("k1", "cached_len", {"s": "cache me"}))

    s = stack(script, config=_beta_may_call)
    for _ in range(3):
        s.client().chat.completions.create(model=MODEL, messages=QUESTION)
    assert s.tools.paths() == ["/len"]  # once for acme, then from the cache
    assert tool_results(s.upstream.requests[-1]) == {"k1": "8"}
    s.client(BETA_KEY).chat.completions.create(model=MODEL, messages=QUESTION)
    assert s.tools.paths() == ["/len", "/len"]  # beta has its own cache
    assert s.app.state.gateway.cache.hits == 2


def _either(body: dict[str, Any]) -> Reply:
    """``mixed`` or ``one_at_a_time``, as the request's ``parallel_tool_calls`` says."""
    return one_at_a_time(body) if body.get("parallel_tool_calls") is False else mixed(body)


def test_a_hidden_round_before_a_hand_back_continued_on_another_replica(
    replicas: tuple[FakeUpstream, FakeTools, list[str]],
) -> None:
    upstream, tools, urls = replicas
    with (
        openai.OpenAI(base_url=urls[0], api_key=ACME_KEY, max_retries=0) as first,
        openai.OpenAI(base_url=urls[1], api_key=ACME_KEY, max_retries=0) as second,
    ):
        history = sequential_first_leg(first, stream=False)
        final = second.chat.completions.create(
            model=MODEL, messages=history, tools=[WEATHER], parallel_tool_calls=False
        )
    assert final.choices[0].message.content == "length 5, weather sunny"
    assert tools.paths() == ["/len"]
    roles = [m["role"] for m in upstream.requests[-1]["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "tool"]
