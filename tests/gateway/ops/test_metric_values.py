"""The gateway's own metric values expose what prometheus_client's classes would,
sample for sample, for the same events (only the clock readings differ: when a series
was made, when an exemplar was seen)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder, generate_latest

from gateway.ops.metric_values import Maker
from gateway.ops.metrics import LATENCY_BUCKETS, Metrics

# A number where a string is meant (1 and "1" are one series, as prometheus_client
# names them).
LABELS = st.sampled_from(["a", "b", 'q"uote', "back\\slash", "new\nline", "1", 1])
AMOUNT = st.floats(min_value=0, max_value=1e6, allow_nan=False)
SECONDS = st.one_of(
    st.sampled_from([0.0, 0.025, 0.05, 0.1, 600.0, 601.0]),
    st.floats(min_value=-1, max_value=1e4, allow_nan=False),
    st.just(float("inf")),
)
EXEMPLAR = st.one_of(st.none(), st.builds(lambda n: {"trace_id": f"{n:032x}"}, st.integers(0)))

EVENTS = st.lists(
    st.one_of(
        st.tuples(st.just("count"), LABELS, AMOUNT),
        st.tuples(st.just("gauge"), LABELS, st.floats(-1e6, 1e6, allow_nan=False)),
        st.tuples(st.just("set"), LABELS, st.floats(-1e6, 1e6, allow_nan=False)),
        st.tuples(st.just("observe"), LABELS, SECONDS, EXEMPLAR),
        st.tuples(st.just("single"), st.just(""), AMOUNT),
    ),
    max_size=40,
)


def _ours() -> tuple[CollectorRegistry, dict[str, Any]]:
    registry = CollectorRegistry(auto_describe=True)
    make = Maker(registry, shared=False)
    return registry, {
        "count": make.counter("t_requests", "Requests.", ["tenant"]),
        "gauge": make.gauge("t_level", "A level.", ["tenant"], "livesum"),
        "observe": make.histogram("t_seconds", "Time.", ["tenant"], LATENCY_BUCKETS),
        "single": make.one_counter("t_errors", "Errors."),
    }


def _theirs() -> tuple[CollectorRegistry, dict[str, Any]]:
    registry = CollectorRegistry(auto_describe=True)
    return registry, {
        "count": Counter("t_requests", "Requests.", ["tenant"], registry=registry),
        "gauge": Gauge("t_level", "A level.", ["tenant"], registry=registry),
        "observe": Histogram(
            "t_seconds", "Time.", ["tenant"], buckets=LATENCY_BUCKETS, registry=registry
        ),
        "single": Counter("t_errors", "Errors.", registry=registry),
    }


def _apply(metrics: dict[str, Any], events: list[tuple[Any, ...]], labelled: bool) -> None:
    for kind, label, value, *more in events:
        if kind == "single":
            metrics["single"].inc(value)
            continue
        family = metrics["count" if kind == "count" else "gauge" if kind != "observe" else kind]
        child = family.labels(label)
        if kind == "count":
            child.inc(value)
        elif kind == "gauge":
            child.inc(value) if value >= 0 else child.dec(-value)
        elif kind == "set":
            child.set(value)
        else:
            child.observe(value, more[0])


def _samples(registry: CollectorRegistry) -> list[tuple[Any, ...]]:
    """Every sample, with the clock's readings left out."""
    found = []
    for metric in registry.collect():
        for sample in metric.samples:
            value = None if sample.name.endswith("_created") else sample.value
            exemplar = sample.exemplar
            seen = (exemplar.labels, exemplar.value) if exemplar is not None else None
            found.append((metric.name, metric.type, sample.name, sample.labels, value, seen))
    return found


@settings(max_examples=150, deadline=None)
@given(EVENTS)
def test_the_same_events_expose_the_same_samples(events: list[tuple[Any, ...]]) -> None:
    ours, our_metrics = _ours()
    theirs, their_metrics = _theirs()
    _apply(our_metrics, events, True)
    _apply(their_metrics, events, True)
    assert _samples(ours) == _samples(theirs)
    if not any(kind == "observe" and more[0] for kind, _, _, *more in events):
        # Without exemplars (whose timestamps are the clock's), the bytes themselves.
        def text(registry: CollectorRegistry) -> list[bytes]:
            return [
                line for line in generate_latest(registry).splitlines() if b"_created" not in line
            ]

        assert text(ours) == text(theirs)


def test_openmetrics_carries_a_buckets_exemplar() -> None:
    registry, metrics = _ours()
    metrics["observe"].labels("a").observe(0.07, {"trace_id": "ab" * 16})
    openmetrics, content_type = choose_encoder("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    lines = openmetrics(registry).decode().splitlines()
    (line,) = [line for line in lines if 'le="0.1"' in line]
    assert line.startswith('t_seconds_bucket{le="0.1",tenant="a"} 1.0 # {trace_id="abab')
    assert "trace_id" not in generate_latest(registry).decode()


def test_a_counter_refuses_to_go_down_and_labels_must_match() -> None:
    _, metrics = _ours()
    with pytest.raises(ValueError, match="only goes up"):
        metrics["count"].labels("a").inc(-1)
    with pytest.raises(ValueError, match="takes labels"):
        metrics["count"].labels("a", "b")


def test_a_counter_made_for_threads_counts_every_threads_additions() -> None:
    registry = CollectorRegistry(auto_describe=True)
    counter = Maker(registry, shared=False).counter("t_drops", "Drops.", ["why"], threads=True)
    child = counter.labels("full")
    start = threading.Barrier(8)

    def work() -> None:
        start.wait()
        for _ in range(20_000):
            child.inc(0.5)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert registry.get_sample_value("t_drops_total", {"why": "full"}) == 80_000


def test_the_apps_metrics_are_the_gateways_own_and_scrape() -> None:
    metrics = Metrics()
    series = metrics.series("t1", "m")
    assert metrics.series("t1", "m") is series
    series.answered(200).inc()
    assert series.answered(204) is metrics.requests.labels("t1", "m", "2xx")
    metrics.in_flight.inc()
    metrics.request_seconds.labels("t1", "m").observe(0.2)
    body, content_type = metrics.exposition()
    assert content_type.startswith("text/plain")
    text = body.decode()
    assert 'toolgate_requests_total{model="m",status="2xx",tenant="t1"} 1.0' in text
    assert "toolgate_requests_in_flight 1.0" in text
    assert 'toolgate_request_duration_seconds_bucket{le="0.25",model="m",tenant="t1"} 1.0' in text
