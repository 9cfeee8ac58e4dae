"""Guardrails screen everything a client reads of an answer (issue 62 §1, docs/design.md
§21): the reasoning a chat upstream sends beside its answer, the thinking blocks a
Messages client is shown, the arguments of a client call handed back; and a Bedrock
``reasoningContent`` block never reaches a Messages client (it is carried, not shown).
Each test asserts what the client actually received."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest

from tests.support import anthropic_upstream, bedrock_upstream
from tests.support.fake_upstream import Reply, calls, tool_call
from tests.support.recorder import Recorder
from tests.support.scripted import MODEL, TENANT_KEY, UPSTREAM_KEY, Harness, config

from .conftest import ACME_KEY, StackFactory
from .conftest import MODEL as STACK_MODEL

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"  # AWS's documented example key
SECRETS_OUT = {
    "name": "answer-secrets",
    "screens": "final_answer",
    "detect": ["secrets"],
    "action": "redact",
}
USER: Any = [{"role": "user", "content": "Which key is it?"}]
WEATHER: Any = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def guarded(*rules: dict[str, Any]) -> Any:
    def change(data: dict[str, Any]) -> dict[str, Any]:
        data["policy"] = {"guardrails": {"rules": list(rules)}}
        return data

    return change


def chat(stack_: Any, body: dict[str, Any]) -> dict[str, Any]:
    """The chat answer as its client received it, every byte."""
    answer = httpx.post(
        f"{stack_.base_url}/chat/completions",
        json={"model": STACK_MODEL, **body},
        headers={"authorization": f"Bearer {ACME_KEY}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    assert AWS_KEY not in answer.text
    found: dict[str, Any] = answer.json()
    return found


def reasoning(said: str, reasoned: str) -> Any:
    """A reasoning model's answer: ``said``, with ``reasoned`` beside it."""

    def reply(body: dict[str, Any]) -> Reply:
        return {"role": "assistant", "content": said, "reasoning_content": reasoned}

    return reply


def test_the_reasoning_beside_a_chat_answer_is_screened(stack: StackFactory) -> None:
    reasons = reasoning(
        "It is the deploy key.", f"The environment says AWS_ACCESS_KEY_ID={AWS_KEY}."
    )
    s = stack(reasons, config=guarded(SECRETS_OUT))
    message = chat(s, {"messages": USER})["choices"][0]["message"]
    assert message["content"] == "It is the deploy key."
    assert message["reasoning_content"].startswith(
        "The environment says AWS_ACCESS_KEY_ID=[redacted: "
    )


def test_streamed_reasoning_is_left_out_of_a_screened_stream(stack: StackFactory) -> None:
    """Only the answer's text is screened in windows as it streams: a screened stream
    carries no other text (a reasoning model's streamed reasoning)."""
    reasons = reasoning("It is the deploy key.", f"The environment says {AWS_KEY}.")
    s = stack(reasons, config=guarded(SECRETS_OUT))
    with httpx.stream(
        "POST",
        f"{s.base_url}/chat/completions",
        json={"model": STACK_MODEL, "messages": USER, "stream": True},
        headers={"authorization": f"Bearer {ACME_KEY}"},
        timeout=30,
    ) as answer:
        lines = [line for line in answer.iter_lines() if line.startswith("data: {")]
    assert AWS_KEY not in "".join(lines)
    deltas = [json.loads(line[6:])["choices"][0]["delta"] for line in lines]
    deltas = [d for d in deltas if d]
    said = "".join(d.get("content") or "" for d in deltas)
    reasoned = "".join(d.get("reasoning_content") or "" for d in deltas)
    assert said == "It is the deploy key."
    assert reasoned == ""


@pytest.mark.parametrize("stream", [False, True])
def test_a_secret_in_the_reasoning_blocks_the_answer_under_a_block_rule(
    stack: StackFactory, stream: bool
) -> None:
    s = stack(reasoning("Done.", AWS_KEY), config=guarded({**SECRETS_OUT, "action": "block"}))
    if stream:  # the reasoning is not shown: the answer's text passes
        raw = httpx.post(
            f"{s.base_url}/chat/completions",
            json={"model": STACK_MODEL, "messages": USER, "stream": True},
            headers={"authorization": f"Bearer {ACME_KEY}"},
        ).text
        assert AWS_KEY not in raw
        assert '"content":"Done."' in raw.replace(" ", "")
        return
    [choice] = chat(s, {"messages": USER})["choices"]
    assert choice["finish_reason"] == "content_filter"
    assert "answer-secrets" in choice["message"]["content"]
    assert "reasoning_content" not in choice["message"]


@pytest.mark.parametrize("action", ["redact", "block"])
def test_the_arguments_of_a_call_handed_back_are_screened(stack: StackFactory, action: str) -> None:
    """A key the model copied into a client tool's arguments never reaches the client."""

    def asks_the_client(body: dict[str, Any]) -> Reply:
        return calls(tool_call("w1", "get_weather", {"city": f"Oslo {AWS_KEY}"}))

    s = stack(asks_the_client, config=guarded({**SECRETS_OUT, "action": action}))
    [choice] = chat(s, {"messages": USER, "tools": WEATHER})["choices"]
    if action == "redact":
        assert choice["finish_reason"] == "tool_calls"
        [call] = choice["message"]["tool_calls"]
        assert json.loads(call["function"]["arguments"]) == {
            "city": "Oslo [redacted: aws_access_key]"
        }
    else:
        assert choice["finish_reason"] == "content_filter"  # withheld, calls and all
        assert not choice["message"].get("tool_calls")


def messages_gateway(harness: Harness, upstream: Recorder, dialect: str) -> str:
    served = harness.serve(upstream).url
    data = config(served, [], policy={"guardrails": {"rules": [SECRETS_OUT]}})
    extra = {"region": bedrock_upstream.REGION} if dialect == "bedrock" else {}
    data["upstreams"][0].update(base_url=served, dialect=dialect, **extra)
    data["models"][0]["upstream_model"] = (
        "anthropic.claude-test-v1:0" if dialect == "bedrock" else "claude-test"
    )
    return harness.gateway(data).url


def ask_claude(url: str) -> Any:
    claude = anthropic.Anthropic(base_url=url, api_key=TENANT_KEY, max_retries=0)
    try:
        raw = claude.messages.with_raw_response.create(
            model=MODEL,
            max_tokens=1024,
            messages=USER,
            thinking={"type": "enabled", "budget_tokens": 512},
        )
    finally:
        claude.close()
    assert AWS_KEY not in raw.http_response.text
    return raw.parse()


def test_a_thinking_block_a_guardrail_changed_is_not_shown(harness: Harness) -> None:
    """Its signature covers its text: it cannot be shown redacted, so it is not shown."""
    model = anthropic_upstream.Messages(
        [
            anthropic_upstream.thinking(f"The key is {AWS_KEY}."),
            anthropic_upstream.text("It is the deploy key."),
        ],
        [anthropic_upstream.thinking("Nothing secret here."), anthropic_upstream.text("Fine.")],
    )
    url = messages_gateway(harness, model.recorder, "anthropic")
    first = ask_claude(url)
    assert [b.type for b in first.content] == ["text"]
    assert first.content[0].text == "It is the deploy key."
    second = ask_claude(url)  # an untouched thinking block is shown, signature and all
    assert [b.type for b in second.content] == ["thinking", "text"]
    assert second.content[0].thinking == "Nothing secret here."
    assert model.refused == []


def test_bedrock_reasoning_is_carried_never_shown_to_a_messages_client(harness: Harness) -> None:
    """Before, a ``reasoningContent`` block came back raw: a block with no ``type``."""
    runtime = bedrock_upstream.Runtime(
        [bedrock_upstream.reasoning("Think it over."), bedrock_upstream.text("Answered.")],
        api_key=UPSTREAM_KEY,  # a Bedrock API key: the configuration's upstream key
    )
    url = messages_gateway(harness, runtime.recorder, "bedrock")
    answer = ask_claude(url)
    assert [b.type for b in answer.content] == ["text"]
    assert answer.content[0].text == "Answered."
    assert runtime.refused == []


def test_a_redacted_answer_carries_no_logprobs_of_its_words_as_they_were(
    stack: StackFactory,
) -> None:
    """The logprobs of an answer spell its tokens: once a guardrail changed a text of
    the answer, they go, or they would tell the text as it was."""
    s = stack(reasoning(f"The key is {AWS_KEY}.", "Looked it up."), config=guarded(SECRETS_OUT))
    [choice] = chat(s, {"messages": USER, "logprobs": True})["choices"]  # no key anywhere
    assert choice["message"]["content"].startswith("The key is [redacted: ")
    assert choice["logprobs"] is None
