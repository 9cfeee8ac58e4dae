"""Budgets end to end (docs/design.md §13): a run stopped by its envelope at the right
round on both surfaces, streamed and not; a tenant's day spent (429
``insufficient_quota`` as the openai SDK raises it) and started again at midnight;
two replicas sharing one Redis under 32 concurrent requests; the usage route."""

from __future__ import annotations

import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import httpx
import openai
import pytest
import redis
from openai.types.chat import ChatCompletionMessageParam

from gateway import GatewayConfig, create_app
from tests.e2e.conftest import ACME_KEY, BETA_KEY, MODEL, StackFactory, gateway_config
from tests.support.fake_tools import FakeTools
from tests.support.fake_upstream import FakeUpstream, calls, say, tool_call, tool_results
from tests.support.schema import assert_valid_completion, assert_valid_error, assert_valid_response
from tests.support.servers import ServerThread

ROUND = {"prompt_tokens": 1000, "completion_tokens": 20, "total_tokens": 1020}
ADMIN_KEY = "sk-admin-usage"
PRICE = {"input_per_mtok": 1.0, "output_per_mtok": 2.0}  # a round of ROUND: $0.00104


def keep_calling(body: dict[str, Any]) -> dict[str, Any]:
    """A model that asks for a tool whenever it may, and answers when it may not."""
    if not body.get("tools"):
        return say("what I have so far")
    n = len(tool_results(body))
    return calls(tool_call(f"call_{n}", "string_length", {"s": "x" * (n + 1)}))


def one_tool_then_answer(body: dict[str, Any]) -> dict[str, Any]:
    if tool_results(body) or not body.get("tools"):
        return say("the answer")
    return calls(tool_call("call_0", "string_length", {"s": "hello"}))


def priced(data: dict[str, Any], budget: dict[str, Any] | None = None) -> dict[str, Any]:
    for model in data["models"]:
        model["price"] = PRICE
    data["server"]["admin_key"] = ADMIN_KEY
    if budget is not None:
        for tenant in data["tenants"]:
            tenant["budget"] = budget
    return data


def _envelope(tokens: int) -> dict[str, str]:
    return {"x-toolgate-max-tokens": str(tokens)}


def test_a_run_ends_with_a_last_round_within_what_its_envelope_has_left(
    stack: StackFactory,
) -> None:
    s = stack(keep_calling, usage=ROUND, config=priced)
    raw = s.client().chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": "go"}],
        extra_headers=_envelope(2200),
    )
    body = json.loads(raw.text)
    assert_valid_completion(body)
    first, second = s.upstream.requests  # two rounds, no more
    assert first["tools"]
    assert 0 < first["max_tokens"] < 2200
    assert "tools" not in second  # the last round offers none
    assert 16 <= second["max_tokens"] < 256  # what is left after the prompt
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["message"]["content"] == "what I have so far"
    assert raw.headers["x-toolgate-stopped"] == "max_tokens_per_request"
    assert body["usage"]["total_tokens"] == 2 * 1020
    # each round 1000 tokens in at $1/M and 20 out at $2/M
    assert raw.headers["x-toolgate-cost-usd"] == "0.00208"


def test_a_run_with_no_room_left_stops_with_the_answer_so_far(stack: StackFactory) -> None:
    s = stack(keep_calling, usage=ROUND)
    raw = s.client().chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": "go"}],
        extra_body={"toolgate": {"max_tokens": 2040}},
    )
    body = json.loads(raw.text)
    assert_valid_completion(body)
    assert len(s.upstream.requests) == 1  # the second round could not fit
    assert len(s.tools.hits) == 1  # the first round's call ran
    assert body["choices"][0]["finish_reason"] == "length"
    assert "tool_calls" not in body["choices"][0]["message"]
    assert raw.headers["x-toolgate-stopped"] == "max_tokens_per_request"
    assert raw.headers["x-toolgate-cost-usd"] == "0"  # the model has no price


def test_on_limit_error_is_422_budget_exceeded(stack: StackFactory) -> None:
    s = stack(
        keep_calling, usage=ROUND, limits={"on_limit": "error", "max_tokens_per_request": 2040}
    )
    with pytest.raises(openai.UnprocessableEntityError) as raised:
        s.client().chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "go"}]
        )
    assert raised.value.code == "budget_exceeded"
    assert "max_tokens_per_request (2040)" in raised.value.message
    assert_valid_error(raised.value.response.json())
    assert raised.value.response.headers["x-toolgate-cost-usd"] == "0"


def test_a_request_cannot_widen_its_tenants_envelope(stack: StackFactory) -> None:
    s = stack(keep_calling, usage=ROUND, limits={"max_tokens_per_request": 2200})
    raw = s.client().chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "go"}], extra_headers=_envelope(10**6)
    )
    assert raw.headers["x-toolgate-stopped"] == "max_tokens_per_request"
    assert len(s.upstream.requests) == 2
    with pytest.raises(openai.BadRequestError) as raised:
        s.client().chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "go"}],
            extra_headers={"x-toolgate-max-cost-usd": "-1"},
        )
    assert raised.value.param == "x-toolgate-max-cost-usd"


def test_a_streamed_chat_run_ends_with_length_and_says_what_it_cost(stack: StackFactory) -> None:
    s = stack(keep_calling, usage=ROUND, config=priced)
    with httpx.stream(
        "POST",
        f"{s.base_url}/chat/completions",
        headers={"authorization": f"Bearer {ACME_KEY}", **_envelope(2200)},
        json={"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "go"}]},
        timeout=30,
    ) as response:
        lines = [line for line in response.iter_lines() if line]
    comments = dict(line[2:].split(": ", 1) for line in lines if line.startswith(": x-toolgate"))
    chunks = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == "length"
    assert comments["x-toolgate-stopped"] == "max_tokens_per_request"
    assert float(comments["x-toolgate-cost-usd"]) > 0
    assert len(s.upstream.requests) == 2


@pytest.mark.parametrize("stream", [False, True])
def test_a_responses_run_stopped_by_its_envelope_is_incomplete(
    stack: StackFactory, stream: bool
) -> None:
    s = stack(keep_calling, usage=ROUND)
    client = s.client()
    if stream:
        events = list(
            client.responses.create(
                model=MODEL, input="go", stream=True, extra_headers=_envelope(2200)
            )
        )
        assert events[-1].type == "response.incomplete"
        response = events[-1].response.model_dump(mode="json", exclude_unset=True)
        assert_valid_response(
            events[-1].model_dump(mode="json", exclude_unset=True), "ResponseStreamEvent"
        )
    else:
        raw = client.responses.with_raw_response.create(
            model=MODEL, input="go", extra_headers=_envelope(2200)
        )
        response = json.loads(raw.text)
        assert raw.headers["x-toolgate-stopped"] == "max_tokens_per_request"
    assert_valid_response(response)
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert len(s.upstream.requests) == 2


class Clock:
    def __init__(self, when: datetime) -> None:
        self.now = when.timestamp()

    def __call__(self) -> float:
        return self.now


def test_a_spent_day_is_429_insufficient_quota_until_midnight(stack: StackFactory) -> None:
    clock = Clock(datetime(2026, 11, 24, 23, 58, tzinfo=UTC))
    s = stack(
        lambda body: say("hi"),
        usage=ROUND,
        config=lambda c: priced(c, {"tokens_per_day": 1500}),
        clock=clock,
    )
    client = s.client(BETA_KEY)  # no tools in play for this model: passed through
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
    first = client.chat.completions.with_raw_response.create(model="other-model", messages=messages)
    assert float(first.headers["x-toolgate-cost-usd"]) == pytest.approx(0.00104)
    client.chat.completions.create(
        model="other-model", messages=messages
    )  # 1020 of 1500 spent: still let through
    with pytest.raises(openai.RateLimitError) as raised:
        client.chat.completions.create(model="other-model", messages=messages)
    error = raised.value
    assert (error.code, error.type) == ("insufficient_quota", "insufficient_quota")
    assert "1500 tokens (tokens_per_day)" in error.message
    assert "resets at 2026-11-25T00:00:00Z (in 2m0s)" in error.message
    assert error.response.headers["retry-after"] == "120"
    assert len(s.upstream.requests) == 2  # the refused request never left
    # A loop request of the same tenant is refused at its first round too.
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model=MODEL, messages=messages)
    clock.now += 121  # a new day
    client.chat.completions.create(model="other-model", messages=messages)
    assert len(s.upstream.requests) == 3


def test_the_usage_route_reads_a_tenants_own_spend_and_the_admin_reads_all(
    stack: StackFactory,
) -> None:
    clock = Clock(datetime(2026, 11, 24, 12, 0, tzinfo=UTC))
    s = stack(
        one_tool_then_answer,
        usage=ROUND,
        config=lambda c: priced(c, {"cost_usd_per_day": 1.0, "cost_usd_per_month": 20.0}),
        clock=clock,
    )
    raw = s.client().chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "go"}]
    )
    cost = float(raw.headers["x-toolgate-cost-usd"])
    assert cost == pytest.approx(2 * 0.00104)
    assert float(raw.headers["x-toolgate-budget-remaining-usd"]) == pytest.approx(1.0 - cost)
    trace = httpx.get(
        f"{s.base_url}/toolgate/traces/{raw.headers['x-request-id']}",
        headers={"authorization": f"Bearer {ACME_KEY}"},
    ).json()
    assert [r["budget"]["cost_usd"] for r in trace["rounds"]] == [0.00104, 0.00104]
    assert trace["cost_usd"] == pytest.approx(cost)

    def usage(key: str, **params: str) -> httpx.Response:
        return httpx.get(
            f"{s.base_url}/toolgate/usage",
            params=params,
            headers={"authorization": f"Bearer {key}"},
        )

    deadline = time.monotonic() + 5
    while (mine := usage(ACME_KEY).json()["data"][0])["tokens"] != 2040:
        assert time.monotonic() < deadline, mine  # settled after the answer was sent
        time.sleep(0.05)
    assert mine | {"cost_usd": round(mine["cost_usd"], 9)} == {
        "tenant": "acme",
        "window": "day",
        "period": "2026-11-24",
        "resets_at": "2026-11-25T00:00:00Z",
        "tokens": 2040,
        "cost_usd": 0.00208,
        "limit_tokens": None,
        "limit_cost_usd": 1.0,
        "remaining_tokens": None,
        "remaining_usd": pytest.approx(1.0 - 0.00208),
    }
    month = usage(ACME_KEY, window="month").json()["data"][0]
    assert (month["period"], month["limit_cost_usd"]) == ("2026-11", 20.0)
    assert usage(ACME_KEY, tenant="beta").status_code == 403
    assert usage(ACME_KEY, window="year").status_code == 400
    assert usage("sk-nobody").status_code == 401
    everyone = usage(ADMIN_KEY).json()["data"]
    assert {row["tenant"]: row["tokens"] for row in everyone} == {"acme": 2040, "beta": 0}
    assert [r["tenant"] for r in usage(ADMIN_KEY, tenant="beta").json()["data"]] == ["beta"]
    metrics = httpx.get(f"{s.gateway.url}/metrics").text
    assert 'toolgate_spend_usd_total{model="gpt-test",tenant="acme"} 0.00208' in metrics
    assert 'toolgate_budget_remaining_usd{tenant="acme",window="day"}' in metrics
    assert 'toolgate_tokens_total{kind="prompt",model="gpt-test",tenant="acme"} 2000.0' in metrics


def test_a_priced_tool_call_the_envelope_cannot_pay_for_is_not_made(stack: StackFactory) -> None:
    def two_calls(body: dict[str, Any]) -> dict[str, Any]:
        if tool_results(body) or not body.get("tools"):
            return say("done")
        return calls(
            tool_call("a", "string_length", {"s": "one"}),
            tool_call("b", "string_length", {"s": "two"}),
        )

    def config(data: dict[str, Any]) -> dict[str, Any]:
        data["policy"] = {"tools": [{"tools": ["string_length"], "cost_usd": 0.01}]}
        return data

    s = stack(two_calls, usage=ROUND, config=config)
    raw = s.client().chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": "go"}],
        extra_headers={"x-toolgate-max-cost-usd": "0.015"},
    )
    results = tool_results(s.upstream.requests[-1])
    assert len(s.tools.hits) == 1  # one call paid for, the other not made
    assert "cost budget" in results["b"]
    assert "cost budget" not in results["a"]
    assert raw.headers["x-toolgate-cost-usd"] == "0.01"


def test_two_replicas_and_32_concurrent_requests_never_spend_past_the_day(
    redis_url: str, redis_prefix: str
) -> None:
    # A server that counts the prompt as the gateway's estimate does, or lower (three
    # bytes a token is a high guess): each round's reservation covers what it spends.
    small = {"prompt_tokens": 300, "completion_tokens": 20, "total_tokens": 320}
    round_usd = (300 * 1000 + 20 * 2000) / 1e9
    upstream = FakeUpstream(one_tool_then_answer, usage=small, delay_s=0.01)
    tools = FakeTools()
    servers = [ServerThread(upstream.app()).start(), ServerThread(tools.app()).start()]
    budget_usd = 0.01  # about fifteen requests of two rounds
    data = priced(gateway_config(servers[0].url, servers[1].url), {"cost_usd_per_day": budget_usd})
    data["models"][0]["max_output_tokens"] = 64  # what a round reserves for its answer
    prefix = f"{redis_prefix}{uuid.uuid4().hex[:8]}:"
    data["store"] = {"url": redis_url, "prefix": prefix, "timeout_s": 2.0}
    replicas = [ServerThread(create_app(GatewayConfig.model_validate(data))).start() for _ in "ab"]
    servers += replicas
    lock = threading.Lock()
    outcomes: list[tuple[int, float, str | None]] = []

    def one(index: int) -> None:
        url = f"{replicas[index % 2].url}/v1/chat/completions"
        response = httpx.post(
            url,
            headers={"authorization": f"Bearer {ACME_KEY}"},
            json={"model": MODEL, "messages": [{"role": "user", "content": f"go {index}"}]},
            timeout=30,
        )
        code = response.json().get("error", {}).get("code") if response.status_code >= 400 else None
        with lock:
            outcomes.append(
                (response.status_code, float(response.headers.get("x-toolgate-cost-usd", 0)), code)
            )

    try:
        with ThreadPoolExecutor(32) as pool:
            list(pool.map(one, range(32)))
        client = redis.Redis.from_url(redis_url)
        try:
            key = f"{prefix}t:{{acme}}:budget:day:{datetime.now(UTC):%Y-%m-%d}"
            deadline = time.monotonic() + 5
            charged = sum(cost for _, cost, _ in outcomes)
            while abs(int(client.hget(key, "n") or 0) / 1e9 - charged) > 1e-9:
                assert time.monotonic() < deadline, (client.hgetall(key), charged, outcomes)
                time.sleep(0.05)
        finally:
            client.close()
        statuses = sorted({status for status, _, _ in outcomes})
        assert statuses == [200, 429], outcomes
        assert {code for status, _, code in outcomes if status == 429} == {"insufficient_quota"}
        # Reserved before each round, atomically across both replicas, and settled
        # with less: never past the budget.
        assert charged <= budget_usd + 1e-9
        served = sum(1 for status, _, _ in outcomes if status == 200)
        assert charged >= budget_usd - 32 * round_usd  # spent down to its last rounds
        assert 5 <= served < 32
    finally:
        for server in reversed(servers):
            server.stop()
