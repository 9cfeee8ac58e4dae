"""The metrics' values as this process keeps them (docs/performance.md, "Metrics at
the cost of an addition"): a counter, a gauge or a histogram per set of label values,
updated with one addition, and read into prometheus_client's exposition
only when ``/metrics`` is scraped.

prometheus_client's own classes check that a metric is observable, check the amount,
and lock its value through several Python calls on every update; a histogram also walks
its buckets one by one. A tool round makes about twenty updates. What is exposed is the
same, sample for sample (``tests/gateway/ops/test_metric_values.py`` compares the two
on the same events).

The values are updated on the event loop's thread, one at a time, so an update is a
plain addition. A metric updated from other threads too (the span exporter counts its
failures on its own) is made with ``threads=True``: its additions take a lock.

Under ``toolgate serve --workers N`` the values must live in prometheus_client's
multiprocess files, which its own classes write: ``Maker`` takes those there
(``SharedFamily``), and these everywhere else.
"""

from __future__ import annotations

import os
import time
from bisect import bisect_left
from collections.abc import Callable, Sequence
from functools import partial
from threading import Lock
from typing import Generic, Literal, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Exemplar
from prometheus_client.utils import INF, floatToGoString


class Counts(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class Gauges(Protocol):
    def inc(self, amount: float = 1) -> None: ...

    def dec(self, amount: float = 1) -> None: ...

    def set(self, value: float) -> None: ...


class Observes(Protocol):
    def observe(self, amount: float, exemplar: dict[str, str] | None = None) -> None: ...


V = TypeVar("V", covariant=True)
C = TypeVar("C", Counter, Gauge, Histogram)


class Labelled(Protocol[V]):
    def labels(self, *values: str) -> V: ...


def created_series() -> bool:
    """Whether counters and histograms expose ``_created``, as prometheus_client
    decides it (``PROMETHEUS_DISABLE_CREATED_SERIES``)."""
    setting = os.environ.get("PROMETHEUS_DISABLE_CREATED_SERIES", "False")
    return setting.lower() not in ("true", "1", "t")


class CounterValue:
    """A counter updated on the event loop's thread only: one addition, no lock."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError("a counter only goes up")
        self.value += amount

    def samples(self, metric: Metric, labels: dict[str, str], created: bool) -> None:
        name = metric.name
        metric.add_sample(f"{name}_total", labels, self.value)
        if created:
            metric.add_sample(f"{name}_created", labels, self.created)


class LockedCounterValue(CounterValue):
    """A counter updated from other threads too (the span exporter's)."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        super().__init__()
        self._lock = Lock()

    def inc(self, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError("a counter only goes up")
        with self._lock:
            self.value += amount


class GaugeValue:
    """A gauge updated on the event loop's thread only."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1) -> None:
        self.value += amount

    def dec(self, amount: float = 1) -> None:
        self.value -= amount

    def set(self, value: float) -> None:
        self.value = float(value)

    def samples(self, metric: Metric, labels: dict[str, str], created: bool) -> None:
        metric.add_sample(metric.name, labels, self.value)


class HistogramValue:
    """Counts per bucket (not cumulative: one addition per observation), their sum,
    and each bucket's last exemplar; made cumulative when read. Observed on the event
    loop's thread only."""

    __slots__ = ("_bounds", "_names", "counts", "created", "exemplars", "sum")

    def __init__(self, bounds: tuple[float, ...], names: tuple[str, ...]) -> None:
        self._bounds = bounds  # ascending, the last one +Inf
        self._names = names  # each bound as the exposition writes it
        self.counts = [0.0] * len(bounds)
        self.exemplars: list[Exemplar | None] = [None] * len(bounds)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, amount: float, exemplar: dict[str, str] | None = None) -> None:
        """``amount`` goes in the first bucket whose bound is at least it (a NaN in
        none, as prometheus_client does)."""
        self.sum += amount
        if amount == amount:  # not NaN
            at = bisect_left(self._bounds, amount)
            self.counts[at] += 1
            if exemplar:
                self.exemplars[at] = Exemplar(exemplar, amount, time.time())

    def samples(self, metric: Metric, labels: dict[str, str], created: bool) -> None:
        name = metric.name
        seen, total = 0.0, self.sum
        for le, count, exemplar in zip(self._names, self.counts, self.exemplars, strict=True):
            seen += count
            metric.add_sample(f"{name}_bucket", {**labels, "le": le}, seen, None, exemplar)
        metric.add_sample(f"{name}_count", labels, seen)
        if self._bounds[0] >= 0:
            metric.add_sample(f"{name}_sum", labels, total)
        if created:
            metric.add_sample(f"{name}_created", labels, self.created)


T = TypeVar("T", CounterValue, LockedCounterValue, GaugeValue, HistogramValue)
GaugeMode = Literal["livesum", "mostrecent"]  # how workers' gauges are merged


class Family(Generic[T]):
    """One metric: its name, help and label names, and a value per set of label
    values, made at its first ``labels``. A collector of the app's registry."""

    __slots__ = (
        "_children",
        "_created",
        "_kind",
        "_lock",
        "_make",
        "documentation",
        "labelnames",
        "name",
    )

    def __init__(
        self,
        kind: str,
        make: Callable[[], T],
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
    ) -> None:
        self._kind = kind
        self._make: Callable[[], T] = make
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._created = created_series()
        self._children: dict[tuple[str, ...], T] = {}
        self._lock = Lock()

    def labels(self, *values: str) -> T:
        child = self._children.get(values)
        return child if child is not None else self._made(values)

    def _made(self, values: tuple[str, ...]) -> T:
        """The value of label values not seen yet, made (named as prometheus_client
        names them: each value as a string, so that ``1`` and ``"1"`` are one series)."""
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, not {values}")
        key = tuple(str(value) for value in values)
        with self._lock:
            child = self._children.get(key)
            if child is None:
                child = self._children[key] = self._make()
        return child

    def describe(self) -> list[Metric]:
        return [Metric(self.name, self.documentation, self._kind)]

    def collect(self) -> list[Metric]:
        metric = Metric(self.name, self.documentation, self._kind)
        with self._lock:
            children = list(self._children.items())
        for values, child in children:
            child.samples(metric, dict(zip(self.labelnames, values, strict=True)), self._created)
        return [metric]


class SharedFamily(Generic[C]):
    """A prometheus_client metric whose children are kept by label values (its own
    ``labels`` normalises the values and takes a lock on every call)."""

    __slots__ = ("_children", "metric")

    def __init__(self, metric: C) -> None:
        self.metric: C = metric
        self._children: dict[tuple[str, ...], C] = {}

    def labels(self, *values: str) -> C:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self.metric.labels(*values)
        return child


class Maker:
    """Makes an app's metrics in its registry: this module's values, or, where every
    worker's must be merged (``shared``), prometheus_client's own in its files."""

    def __init__(self, registry: CollectorRegistry, shared: bool) -> None:
        self.registry = registry
        self.shared = shared

    def _own(self, family: Family[T]) -> Family[T]:
        self.registry.register(family)
        return family

    def counter(
        self, name: str, documentation: str, labelnames: Sequence[str], threads: bool = False
    ) -> Labelled[Counts]:
        """``threads``: updated from threads other than the event loop's too."""
        if self.shared:
            return SharedFamily(Counter(name, documentation, labelnames, registry=self.registry))
        make = LockedCounterValue if threads else CounterValue
        return self._own(Family("counter", make, name, documentation, labelnames))

    def gauge(
        self, name: str, documentation: str, labelnames: Sequence[str], mode: GaugeMode
    ) -> Labelled[Gauges]:
        if self.shared:
            made = Gauge(
                name, documentation, labelnames, registry=self.registry, multiprocess_mode=mode
            )
            return SharedFamily(made)
        return self._own(Family("gauge", GaugeValue, name, documentation, labelnames))

    def histogram(
        self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]
    ) -> Labelled[Observes]:
        if self.shared:
            made = Histogram(
                name, documentation, labelnames, buckets=buckets, registry=self.registry
            )
            return SharedFamily(made)
        bounds = tuple(float(b) for b in buckets)
        if bounds[-1] != INF:
            bounds += (INF,)
        names = tuple(floatToGoString(b) for b in bounds)  # type: ignore[no-untyped-call]
        made_value = partial(HistogramValue, bounds, names)
        return self._own(Family("histogram", made_value, name, documentation, labelnames))

    def one_counter(self, name: str, documentation: str) -> Counts:
        """A counter without labels."""
        if self.shared:
            return Counter(name, documentation, registry=self.registry)
        return self._own(Family("counter", CounterValue, name, documentation)).labels()

    def one_gauge(self, name: str, documentation: str, mode: GaugeMode) -> Gauges:
        """A gauge without labels."""
        if self.shared:
            return Gauge(name, documentation, registry=self.registry, multiprocess_mode=mode)
        return self._own(Family("gauge", GaugeValue, name, documentation)).labels()
