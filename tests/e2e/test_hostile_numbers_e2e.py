"""Hostile numbers end to end (issue 34 §3): the gateway under uvicorn, driven by the
openai SDK, with an upstream that reports negative and absurd usage, on both surfaces,
streamed and not, tools in play and passed through; and a client's small
``max_tokens`` honoured by a tenant with a budget."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.faults.test_hostile_numbers import NEGATIVE, assert_believable
from tests.support.fake_upstream import say

from .conftest import ACME_KEY, BETA_KEY, MODEL, StackFactory
from .test_budget_e2e import one_tool_then_answer, priced


@pytest.mark.parametrize("key", [ACME_KEY, BETA_KEY], ids=["tools in play", "passed through"])
@pytest.mark.parametrize("usage", [NEGATIVE, {"prompt_tokens": 10**12, "completion_tokens": 1.5}])
def test_an_upstream_that_lies_about_usage_is_no_500(
    stack: StackFactory, key: str, usage: dict[str, Any]
) -> None:
    """It was a plain-text 500 (a Prometheus counter refuses a negative increment)."""
    s = stack(one_tool_then_answer, usage=usage)
    client = s.client(key)
    model = MODEL if key == ACME_KEY else "other-model"
    messages: Any = [{"role": "user", "content": "how long is hello?"}]
    answer = client.chat.completions.create(model=model, messages=messages)
    assert_believable(answer.usage)
    if usage is NEGATIVE:  # what could be true is kept, summed over the rounds
        assert answer.usage is not None
        assert answer.usage.completion_tokens in (3, 6)
    stream = client.chat.completions.create(
        model=model, messages=messages, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    usages = [c.usage for c in chunks if c.usage is not None]
    assert usages or usage is not NEGATIVE  # nothing believed: no usage to send
    if key == ACME_KEY:  # a pass-through stream nothing meters is relayed as it came
        for said in usages:
            assert_believable(said)
    response = client.responses.create(model=model, input="how long is hello?")
    assert_believable(response.usage)
    metrics = httpx.get(s.gateway.url + "/metrics")
    assert metrics.status_code == 200
    assert "toolgate_tokens_total" in metrics.text


def test_a_small_max_tokens_is_honoured_under_a_budget(stack: StackFactory) -> None:
    """A classifier's 1 and a title generator's 10 are answered, not refused as a spent
    window; a window that is spent is still a 429."""
    usage = {"prompt_tokens": 50, "completion_tokens": 1, "total_tokens": 51}
    s = stack(
        lambda body: say("yes"), usage=usage, config=lambda c: priced(c, {"tokens_per_day": 1000})
    )
    client = s.client(ACME_KEY)
    messages: Any = [{"role": "user", "content": "Is this spam?"}]
    client.chat.completions.create(model=MODEL, messages=messages, max_tokens=1)
    client.chat.completions.create(model=MODEL, messages=messages, max_completion_tokens=10)
    sent = s.upstream.requests[-2:]
    assert sent[0]["max_tokens"] == 1
    assert sent[1]["max_completion_tokens"] == 10
    refused: openai.RateLimitError | None = None
    for _ in range(40):  # 51 tokens a request against 1000 a day
        try:
            client.chat.completions.create(model=MODEL, messages=messages, max_tokens=1)
        except openai.RateLimitError as exc:
            refused = exc
            break
    assert refused is not None
    assert refused.code == "insufficient_quota"
