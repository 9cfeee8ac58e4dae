"""What an operator sees: exact metrics after known traffic, a dashboard that only
queries exported metrics, request traces, one log line per request."""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.fake_upstream import Reply, calls, say, tool_call, tool_results

from .conftest import ACME_KEY, BETA_KEY, MODEL, Stack, StackFactory

USER: Any = [{"role": "user", "content": "go"}]
ROOT = Path(__file__).resolve().parents[2]


def scrape(
    s: Stack, token: str | None = None
) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    response = httpx.get(f"{s.gateway.url}/metrics", headers=headers)
    assert response.status_code == 200
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def traffic_script(body: dict[str, Any]) -> Reply:
    """By the user's words: one tool round, a forbidden tool, or a plain answer."""
    results = tool_results(body)
    word = body["messages"][0]["content"]
    if results or "tools" not in body or word == "plain":
        return say("done")
    if word == "tool":
        return calls(tool_call("t1", "string_length", {"s": "abc"}))
    if word == "forbidden":
        return calls(tool_call("f1", "secret_admin", {}), tool_call("f2", "no_such_tool", {}))
    return calls(tool_call("x1", "string_length", {"s": "x"}))  # "capped"


def with_beta_limited(config: dict[str, Any]) -> dict[str, Any]:
    config["tenants"][1]["limits"] = {"requests_per_minute": 1}
    return config


def test_metrics_count_exactly(stack: StackFactory) -> None:
    s = stack(traffic_script, config=with_beta_limited)
    acme, beta = s.client(), s.client(BETA_KEY)

    def ask(word: str, client: openai.OpenAI = acme, **options: Any) -> None:
        options.setdefault("model", MODEL)
        client.chat.completions.create(messages=[{"role": "user", "content": word}], **options)

    ask("tool")  # 2 rounds, 1 tool call
    ask("forbidden")  # 2 rounds, 2 refused calls
    ask("capped", extra_headers={"x-toolgate-max-tool-calls": "0"})  # 2 rounds, cap hit
    ask("plain", beta)  # beta's loop: one round, answered at once
    with pytest.raises(openai.RateLimitError):
        ask("plain", beta)
    with pytest.raises(openai.NotFoundError):
        ask("plain", model="nope")

    m = scrape(s)
    assert value(m, "toolgate_requests_total", tenant="acme", model=MODEL, status="2xx") == 3
    assert value(m, "toolgate_requests_total", tenant="beta", model=MODEL, status="2xx") == 1
    assert value(m, "toolgate_requests_total", tenant="beta", model="(none)", status="4xx") == 1
    assert value(m, "toolgate_requests_total", tenant="acme", model="(none)", status="4xx") == 1
    assert value(m, "toolgate_rate_limited_total", tenant="beta", kind="requests") == 1
    assert (
        value(
            m,
            "toolgate_tool_calls_total",
            tenant="acme",
            tool="string_length",
            source="http",
            outcome="ok",
        )
        == 1
    )
    assert (
        value(
            m,
            "toolgate_tool_calls_total",
            tenant="acme",
            tool="secret_admin",
            source="http",
            outcome="denied",
        )
        == 1
    )
    assert (
        value(
            m,
            "toolgate_tool_calls_total",
            tenant="acme",
            tool="(unknown)",
            source="(none)",
            outcome="unknown",
        )
        == 1
    )
    assert (
        value(
            m,
            "toolgate_tool_calls_total",
            tenant="acme",
            tool="string_length",
            source="http",
            outcome="denied",
        )
        == 1
    )  # over the narrowed budget of 0
    assert value(m, "toolgate_cap_hits_total", tenant="acme", kind="tool_calls") == 1
    assert value(m, "toolgate_loop_iterations_count", tenant="acme") == 3
    assert value(m, "toolgate_loop_iterations_sum", tenant="acme") == 6
    assert value(m, "toolgate_upstream_calls_total", upstream="fake", status="2xx") == 7
    # 7 upstream rounds of 10 prompt and 5 completion tokens each (3 loops, 1 pass-through).
    assert value(m, "toolgate_tokens_total", tenant="acme", model=MODEL, kind="prompt") == 60
    assert value(m, "toolgate_tokens_total", tenant="beta", model=MODEL, kind="completion") == 5
    assert value(m, "toolgate_requests_in_flight") == 0
    assert value(m, "toolgate_request_duration_seconds_count", tenant="acme", model=MODEL) == 3
    assert (
        value(m, "toolgate_tool_duration_seconds_count", tool="string_length", source="http") == 1
    )


def test_every_fixed_series_exists_before_any_traffic(stack: StackFactory) -> None:
    """Counters whose labels come from the configuration or a fixed list are exported
    at zero from the start: a rate() or an alert has a series before the first event."""
    m = scrape(stack())
    for result in ("hit", "miss"):
        assert ("toolgate_tool_cache_lookups_total", frozenset({("result", result)})) in m
    for status in ("2xx", "4xx", "5xx", "error", "timeout"):
        assert value(m, "toolgate_upstream_calls_total", upstream="fake", status=status) == 0
        assert (
            "toolgate_upstream_calls_total",
            frozenset({("upstream", "fake"), ("status", status)}),
        ) in m
    outcomes = (
        "ok",
        "http_error",
        "tool_error",
        "unreadable",
        "timeout",
        "invalid_args",
        "denied",
        "unknown",
    )
    for outcome in outcomes:
        labels = {
            ("tenant", "acme"),
            ("tool", "string_length"),
            ("source", "http"),
            ("outcome", outcome),
        }
        assert ("toolgate_tool_calls_total", frozenset(labels)) in m
    labels = {("tenant", "acme"), ("model", MODEL), ("status", "5xx")}
    assert ("toolgate_requests_total", frozenset(labels)) in m
    assert ("toolgate_cap_hits_total", frozenset({("tenant", "acme"), ("kind", "time")})) in m
    # The dashboard's latency panels have a series (at zero) before the first request.
    pair = frozenset({("tenant", "acme"), ("model", MODEL)})
    for histogram in ("toolgate_request_duration_seconds", "toolgate_stream_first_byte_seconds"):
        assert (f"{histogram}_count", pair) in m
        assert value(m, f"{histogram}_count", tenant="acme", model=MODEL) == 0
    for kind in ("prompt", "completion", "cached_prompt", "cache_write_prompt", "reasoning"):
        assert value(m, "toolgate_tokens_total", tenant="acme", model=MODEL, kind=kind) == 0
    assert value(m, "toolgate_spend_usd_total", tenant="acme", model=MODEL) == 0
    labels = {("tool", "add"), ("source", "http")}
    assert ("toolgate_tool_duration_seconds_count", frozenset(labels)) in m
    # Only what the configuration allows: beta may not use add.
    beta_tools = {
        dict(labels)["tool"]
        for name, labels in m
        if name == "toolgate_tool_calls_total" and ("tenant", "beta") in labels
    }
    assert beta_tools == {"string_length", "cached_len"}


def test_the_dashboard_only_queries_exported_metrics(stack: StackFactory) -> None:
    dashboard = json.loads((ROOT / "config" / "grafana" / "toolgate.json").read_text())
    assert dashboard["templating"]["list"][0]["type"] == "datasource"
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"] if "expr" in t]
    used = {
        re.sub(r"_(bucket|sum|count|total)$", "", n)
        for e in exprs
        for n in re.findall(r"\btoolgate_[a-z_]+", e)
    }
    s = stack()
    text = httpx.get(f"{s.gateway.url}/metrics").text
    exported = {family.name for family in text_string_to_metric_families(text)}
    assert used, "the dashboard queries nothing"
    assert used <= exported, f"not exported: {sorted(used - exported)}"
    titles = " ".join(p["title"] for p in dashboard["panels"]).lower()
    for wanted in (
        "requests",
        "error",
        "latency",
        "tool calls",
        "slowest tools",
        "iterations",
        "cap hits",
        "tokens",
        "rate-limited",
        "upstream errors",
        "policy verdicts",
        "approvals waiting",
        "approval decision",
        "spend per tenant",
        "budget left",
    ):
        assert wanted in titles


def test_metrics_may_need_a_token(stack: StackFactory) -> None:
    def protected(config: dict[str, Any]) -> dict[str, Any]:
        config["server"]["metrics_token"] = "scrape-me"
        return config

    s = stack(config=protected)
    assert httpx.get(f"{s.gateway.url}/metrics").status_code == 401
    assert (
        httpx.get(f"{s.gateway.url}/metrics", headers={"authorization": "Bearer wrong"}).status_code
        == 401
    )
    assert scrape(s, "scrape-me")


def test_a_request_trace(stack: StackFactory) -> None:
    def script(body: dict[str, Any]) -> Reply:
        if tool_results(body):
            return say("found")
        return calls(
            tool_call("l1", "lookup", {"customer": "c-42"}),
            tool_call("l2", "string_length", {"s": "x" * 30}),
        )

    s = stack(script, config=lambda c: {**c, "traces": {"result_chars": 40}})
    raw = s.client(
        default_headers={"x-toolgate-user": "alice@example.com"}
    ).chat.completions.with_raw_response.create(model=MODEL, messages=USER)
    request_id = raw.headers["x-request-id"]
    url = f"{s.base_url}/toolgate/traces/{request_id}"
    response = httpx.get(url, headers={"authorization": f"Bearer {ACME_KEY}"})
    assert response.status_code == 200
    trace = response.json()
    assert trace["request_id"] == request_id
    assert trace["tenant"] == "acme"
    assert [r["iteration"] for r in trace["rounds"]] == [1, 2]
    assert trace["rounds"][0]["tool_calls"] == ["lookup", "string_length"]
    assert trace["rounds"][0]["usage"]["total_tokens"] == 15
    lookup, length = trace["tool_calls"]
    assert lookup["arguments"] == {"customer": "c-42", "tenant": "acme", "user": "[redacted]"}
    assert lookup["outcome"] == "ok"
    assert lookup["status"] == 200
    assert len(lookup["result"]) < 80
    assert lookup["result"].endswith("more]")
    assert length["result"] == "30"
    assert length["duration_ms"] > 0
    text = response.text
    assert "alice@example.com" not in text
    assert "sk-upstream" not in text
    other = httpx.get(url, headers={"authorization": f"Bearer {BETA_KEY}"})
    assert other.status_code == 404
    assert (
        httpx.get(
            f"{s.base_url}/toolgate/traces/req_nope",
            headers={"authorization": f"Bearer {ACME_KEY}"},
        ).status_code
        == 404
    )


def test_one_log_line_per_request(stack: StackFactory, caplog: pytest.LogCaptureFixture) -> None:
    s = stack(traffic_script)
    with caplog.at_level(logging.INFO, logger="gateway.access"):
        s.client().chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "tool"}]
        )
        with pytest.raises(openai.AuthenticationError):
            s.client("sk-bad").chat.completions.create(model=MODEL, messages=USER)
        deadline = time.monotonic() + 2
        while len([r for r in caplog.records if r.name == "gateway.access"]) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    lines = [r.toolgate for r in caplog.records if r.name == "gateway.access"]  # type: ignore[attr-defined]
    ok, refused = lines
    assert ok["tenant"] == "acme"
    assert ok["status"] == 200
    assert (ok["iterations"], ok["tool_calls"]) == (2, 1)
    assert (ok["prompt_tokens"], ok["completion_tokens"]) == (20, 10)
    assert ok["latency_ms"] > 0
    assert ok["request_id"].startswith("req_")
    assert (refused["status"], refused["error"]) == (401, "invalid_api_key")
    # No tool payloads (request ids are random hex, which may hold "abc" themselves).
    text = json.dumps([{k: v for k, v in line.items() if k != "request_id"} for line in lines])
    assert "abc" not in text
    assert "tool" not in [v for line in lines for v in line.values()]  # no prompts
