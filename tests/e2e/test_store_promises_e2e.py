"""What a client is told is kept is kept, on a store slowed on cue (a real Redis behind a
proxy that holds its replies): a stored response, the hidden turns of a hand-back, a
trace. A passing stall (a Redis call past ``store.timeout_s`` on a busy host) loses
none of them; a stall longer than ``store.keep_retry_s`` is said plainly: the answer
says ``store: false`` (streamed or not), a hand-back fails with a 503.

Before, one slow call made the gateway skip the store for a second: every response of
that second answered 200 with an id it never stored."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import openai
import pytest

from tests.support.fake_upstream import calls, say, tool_call, tool_results
from tests.support.servers import until
from tests.support.slow_proxy import SlowProxy

from .conftest import ACME_KEY, MODEL, Stack, StackFactory
from .test_mixed_turns_e2e import QUESTION, WEATHER, mixed

PASSING_STALL_S = 0.4  # past store.timeout_s (0.1), within store.keep_retry_s (1.0)
LONG_STALL_S = 30.0  # past keep_retry_s: nothing can be kept while it lasts


@pytest.fixture
def proxy(redis_url: str) -> Iterator[SlowProxy]:
    target = urlsplit(redis_url)
    with SlowProxy(target.hostname or "127.0.0.1", target.port or 6379) as slowed:
        yield slowed


@pytest.fixture
def slowed_stack(
    stack: StackFactory, proxy: SlowProxy, redis_prefix: str
) -> Iterator[tuple[Stack, SlowProxy]]:
    store = {"url": proxy.url(), "prefix": f"{redis_prefix}{uuid.uuid4().hex[:6]}:"}

    def on_the_slowed_store(config: dict[str, Any]) -> dict[str, Any]:
        config["store"] = {**store, "timeout_s": 0.1, "keep_retry_s": 1.0}
        return config

    def script(body: dict[str, Any]) -> Any:
        asked = body["messages"][0]["content"]
        if asked == QUESTION[0]["content"]:
            return mixed(body)
        if asked == "go":  # one server tool round
            return (
                say("done")
                if tool_results(body)
                else calls(tool_call("c1", "string_length", {"s": "abc"}))
            )
        return say("kept")

    s = stack(script, config=on_the_slowed_store)
    yield s, proxy
    proxy.stall(0)  # the stack's shutdown reads nothing late


def store_errors(s: Stack) -> float:
    text = httpx.get(f"{s.gateway.url}/metrics").text
    found = [line for line in text.splitlines() if line.startswith("toolgate_store_errors_total")]
    return sum(float(line.split()[-1]) for line in found)


def retrieve(s: Stack, response_id: str) -> httpx.Response:
    return httpx.get(
        f"{s.base_url}/responses/{response_id}", headers={"authorization": f"Bearer {ACME_KEY}"}
    )


def respond(s: Stack, stream: bool) -> tuple[Any, str | None]:
    """A Responses answer with ``store: true``, and its ``x-toolgate-stored`` header
    (None when it has none, or for a stream, which says it in its last event)."""
    client = s.client(default_headers={"x-toolgate-tools": ""})
    if stream:
        events = list(client.responses.create(model=MODEL, input="hi", store=True, stream=True))
        assert events[-1].type == "response.completed"
        return events[-1].response, None
    raw = client.responses.with_raw_response.create(model=MODEL, input="hi", store=True)
    return raw.parse(), raw.headers.get("x-toolgate-stored")


@pytest.mark.parametrize("stream", [False, True])
def test_a_response_answered_during_a_passing_stall_is_stored(
    slowed_stack: tuple[Stack, SlowProxy], stream: bool
) -> None:
    s, proxy = slowed_stack
    proxy.stall(PASSING_STALL_S)
    response, stored = respond(s, stream)
    assert stored is None
    assert store_errors(s) >= 1  # the stall was met: some call passed its timeout
    assert getattr(response, "store", None) is True
    fetched = retrieve(s, response.id)
    assert fetched.status_code == 200, fetched.text
    assert fetched.json()["output"][0]["content"][0]["text"] == "kept"
    # and it can be continued, as its client was told
    later = s.client().responses.create(model=MODEL, input="more", previous_response_id=response.id)
    assert later.output_text == "kept"


@pytest.mark.parametrize("stream", [False, True])
def test_a_response_that_could_not_be_stored_says_so(
    slowed_stack: tuple[Stack, SlowProxy], stream: bool
) -> None:
    s, proxy = slowed_stack
    proxy.stall(LONG_STALL_S)
    response, stored = respond(s, stream)
    assert stored == (None if stream else "false")
    assert response.output_text == "kept"  # the answer itself is given
    assert getattr(response, "store", None) is False  # and says it was not kept
    proxy.stall(0)  # the store answers again (after the cooldown its stall began)
    fetched = until(lambda: retrieve(s, response.id), lambda r: r.status_code != 503)
    assert fetched is not None
    assert fetched.status_code == 404


def test_a_hand_back_during_a_passing_stall_keeps_its_hidden_turns(
    slowed_stack: tuple[Stack, SlowProxy],
) -> None:
    s, proxy = slowed_stack
    client = s.client()
    proxy.stall(PASSING_STALL_S)
    first = client.chat.completions.create(model=MODEL, messages=QUESTION, tools=[WEATHER])
    [call] = first.choices[0].message.tool_calls or []
    history: Any = [
        *QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    second = client.chat.completions.create(model=MODEL, messages=history, tools=[WEATHER])
    # the hidden server round was put back: the model read both results
    assert second.choices[0].message.content == "length 5, weather sunny"


def test_a_hand_back_whose_hidden_turns_cannot_be_kept_fails_saying_so(
    slowed_stack: tuple[Stack, SlowProxy],
) -> None:
    s, proxy = slowed_stack
    proxy.stall(LONG_STALL_S)
    with pytest.raises(openai.APIStatusError) as failed:
        s.client().chat.completions.create(model=MODEL, messages=QUESTION, tools=[WEATHER])
    assert failed.value.status_code == 503
    assert "could not be kept" in failed.value.message


def test_a_trace_written_during_a_passing_stall_is_kept(
    slowed_stack: tuple[Stack, SlowProxy],
) -> None:
    """A trace is written after its answer; one the store did not take is tried again."""
    s, proxy = slowed_stack
    proxy.stall(PASSING_STALL_S)  # over the request, and its trace written after it
    raw = s.client().chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "go"}]
    )
    request_id = raw.headers["x-request-id"]
    trace = httpx.get(
        f"{s.base_url}/toolgate/traces/{request_id}",
        headers={"authorization": f"Bearer {ACME_KEY}"},
        timeout=30,
    )
    assert trace.status_code == 200, trace.text
    assert [c["name"] for c in json.loads(trace.text)["tool_calls"]] == ["string_length"]
