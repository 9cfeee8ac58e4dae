"""Priming the metrics (every series the configuration allows, at zero): a catalog of
thousands is not primed tool by tool, so a snapshot swap stays quick and a scrape
small; its tools' series appear at their first call."""

from __future__ import annotations

import re

from gateway.ops.metrics import PRIMED_TOOLS, Labels, Metrics


def series(metrics: Metrics, name: str) -> int:
    text = metrics.exposition()[0].decode()
    return sum(1 for line in text.splitlines() if line.startswith(name + "{"))


def labels(tools: int) -> Labels:
    names = [f"t{i}" for i in range(tools)]
    return Labels(
        tenants={"a": (["m"], names), "b": (["m"], [])},
        upstreams=["u"],
        tools=dict.fromkeys(names, "http"),
        outcomes=("ok", "timeout"),
        cap_kinds=("iterations",),
        guardrails=(("no-secrets", "redact"),),
    )


def test_a_small_catalog_is_primed_tool_by_tool() -> None:
    metrics = Metrics()
    metrics.prime(labels(3))
    assert series(metrics, "toolgate_tool_calls_total") == 3 * 2
    assert series(metrics, "toolgate_tool_searches_total") == 2  # the tenant with tools
    assert series(metrics, "toolgate_tool_search_bytes_saved_total") == 1


def test_a_catalog_of_thousands_is_not() -> None:
    metrics = Metrics()
    metrics.prime(labels(PRIMED_TOOLS + 1))
    assert series(metrics, "toolgate_tool_calls_total") == 0
    assert series(metrics, "toolgate_tool_duration_seconds_count") == 0
    assert series(metrics, "toolgate_requests_total") > 0  # the rest is primed
    metrics.tool_calls.labels("a", "t7", "http", "ok").inc()
    assert series(metrics, "toolgate_tool_calls_total") == 1


# Gauges whose zero would say something untrue: a tenant's budget left (zero: spent).
NOT_PRIMED = {"toolgate_budget_remaining_usd"}


def test_every_family_has_its_series_before_its_first_event() -> None:
    """A dashboard panel or alert over a family with no series says "No data" on a
    healthy gateway: every family is primed (a new one fails here until it is)."""
    metrics = Metrics()
    metrics.prime(labels(3))
    text = metrics.exposition()[0].decode()
    families = set(re.findall(r"^# TYPE (\S+) ", text, re.MULTILINE))
    sampled = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"}
    unprimed = {
        family
        for family in families
        if not any(name == family or name.startswith(family + "_") for name in sampled)
    }
    assert unprimed == NOT_PRIMED
    assert 'toolgate_requests_cancelled_total{tenant="a"} 0.0' in text
