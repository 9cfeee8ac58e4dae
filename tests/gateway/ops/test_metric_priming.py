"""Priming the metrics (every series the configuration allows, at zero): a catalog of
thousands is not primed tool by tool, so a snapshot swap stays quick and a scrape
small; its tools' series appear at their first call."""

from __future__ import annotations

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
