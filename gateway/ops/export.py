"""The OpenTelemetry SDK at work (docs/design.md §14), imported only when tracing is on.

``Telemetry`` owns the app's own tracer provider (never the process-global one: two
apps in one process, as tests build them, trace apart) and its export. Spans are
queued as they end and sent in batches by the SDK's worker thread, so a request never
waits on the collector; a span that finds the queue full, or whose batch the
collector refused or could not be reached for, is dropped and counted
(``toolgate_otel_dropped_spans_total{reason}``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider, sampling
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from gateway.errors import ConfigError
from gateway.ops.metrics import Metrics
from gateway.ops.spans import Spans
from gateway.ops.telemetry import VERSION, OtelSettings
from tool_registry import Redactor

logger = logging.getLogger("gateway.telemetry")

DEFAULT_BATCH = 512
SHUTDOWN_S = 3.0  # how long a stopping gateway gives its last spans


def make_sampler(name: str, ratio: float) -> sampling.Sampler:
    ratio_based = sampling.TraceIdRatioBased(ratio)
    return {
        "always_on": sampling.ALWAYS_ON,
        "always_off": sampling.ALWAYS_OFF,
        "traceidratio": ratio_based,
        "parentbased_always_on": sampling.ParentBased(sampling.ALWAYS_ON),
        "parentbased_always_off": sampling.ParentBased(sampling.ALWAYS_OFF),
        "parentbased_traceidratio": sampling.ParentBased(ratio_based),
    }[name]


def otlp_exporter(settings: OtelSettings) -> SpanExporter:
    """The SDK's OTLP exporter for the configured protocol."""
    if settings.protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcExporter,
            )
        except ImportError:
            raise ConfigError(
                "otel.protocol grpc needs the gRPC exporter: pip install 'toolgate[otlp-grpc]'"
            ) from None
        exporter: SpanExporter = GrpcExporter(
            endpoint=settings.endpoint,
            insecure=settings.endpoint.startswith("http://"),
            headers=settings.headers or None,
            timeout=settings.timeout_s,
        )
        return exporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(
        endpoint=settings.endpoint, headers=settings.headers, timeout=settings.timeout_s
    )


class _Counted(SpanExporter):
    """The exporter, telling the queue what left it and counting what was lost."""

    def __init__(self, exporter: SpanExporter, queue: ExportQueue) -> None:
        self._exporter = exporter
        self._queue = queue

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self._queue.taken(len(spans))
        try:
            result = self._exporter.export(spans)
        except Exception:
            logger.exception("exporting %d spans failed", len(spans))
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self._queue.failed.inc(len(spans))
        return result

    def shutdown(self) -> None:
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._exporter.force_flush(timeout_millis)


class ExportQueue(SpanProcessor):
    """The SDK's batch processor, with every span it loses counted. Past
    ``max_queue_size`` spans waiting, a span is dropped here and counted (the SDK's own
    queue would silently drop its oldest instead); what the worker takes leaves the
    count as it is handed to the exporter."""

    def __init__(self, exporter: SpanExporter, settings: OtelSettings, metrics: Metrics) -> None:
        self.full = metrics.otel_dropped_spans.labels("queue_full")
        self.failed = metrics.otel_dropped_spans.labels("export_failed")
        self._size = settings.max_queue_size
        self._lock = threading.Lock()
        self._waiting = 0
        self._batch = BatchSpanProcessor(
            _Counted(exporter, self),
            max_queue_size=self._size,
            schedule_delay_millis=settings.delay_ms,
            max_export_batch_size=min(DEFAULT_BATCH, self._size),
        )

    def taken(self, count: int) -> None:
        with self._lock:
            self._waiting = max(self._waiting - count, 0)

    def on_end(self, span: ReadableSpan) -> None:
        context = span.context
        if context is None or not context.trace_flags.sampled:
            return
        with self._lock:
            room = self._waiting < self._size
            if room:
                self._waiting += 1
        if not room:
            self.full.inc()
            return
        self._batch.on_end(span)

    def shutdown(self) -> None:
        self._batch.shutdown()  # type: ignore[no-untyped-call]

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._batch.force_flush(timeout_millis)


class Telemetry:
    """The app's tracer provider and its export, opened with the app and closed with it."""

    def __init__(
        self,
        settings: OtelSettings,
        metrics: Metrics,
        redactor: Redactor,
        exporter: SpanExporter | None = None,
    ) -> None:
        self.settings = settings
        redactor.extend(settings.secrets)
        self._provider = TracerProvider(
            sampler=make_sampler(settings.sampler, settings.ratio),
            resource=Resource.create(dict[str, Any](settings.resource)),
            shutdown_on_exit=False,
        )
        self._queue = ExportQueue(exporter or otlp_exporter(settings), settings, metrics)
        self._provider.add_span_processor(self._queue)
        tracer = self._provider.get_tracer("toolgate", VERSION)
        self.spans = Spans(tracer, redactor, settings.capture_content, settings.content_chars)

    def flush(self, timeout_ms: int = 5000) -> bool:
        """Export what is queued now (blocking: for tests and shutdown, never a request)."""
        return self._queue.force_flush(timeout_ms)

    def close(self) -> None:
        """Send what is left, within ``SHUTDOWN_S`` (blocking: run it off the loop). A
        collector that does not answer keeps the spans, never the gateway."""
        done = threading.Event()

        def shut() -> None:
            self._provider.shutdown()
            done.set()

        threading.Thread(target=shut, name="otel-shutdown", daemon=True).start()
        if not done.wait(SHUTDOWN_S):
            logger.warning("spans still waiting for the collector were dropped at shutdown")
