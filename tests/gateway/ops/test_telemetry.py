"""Tracing's settings, its export queue and its parsers of hostile input (docs/design.md §14).
The wire and the span tree are proven end to end (tests/e2e/test_telemetry_e2e.py)."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind

from gateway.chat_json import decode_messages
from gateway.config import OtelConfig, OtlpProtocol
from gateway.errors import ConfigError
from gateway.ops.export import ExportQueue
from gateway.ops.metrics import Metrics
from gateway.ops.spans import Spans, usage_attributes
from gateway.ops.telemetry import OtelSettings, otel_settings, traces_endpoint
from gateway.upstream.rounds import genai_messages
from tool_registry import Redactor

ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}


def resolved(environ: dict[str, str], **config: Any) -> OtelSettings:
    found = otel_settings(OtelConfig.model_validate(config), environ)
    assert found is not None
    return found


@pytest.mark.parametrize(
    ("config", "environ", "on"),
    [
        ({}, {}, False),  # off by default
        ({"endpoint": "http://c:4318"}, {}, True),
        ({}, ENDPOINT, True),
        ({}, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, True),
        ({}, {**ENDPOINT, "OTEL_SDK_DISABLED": "true"}, False),
        ({}, {**ENDPOINT, "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"enabled": False}, ENDPOINT, False),  # the file wins
        ({"enabled": True}, {}, True),  # on, to the SDK's default endpoint
        ({"enabled": True}, {"OTEL_SDK_DISABLED": "true"}, True),
    ],
)
def test_tracing_is_on_when_an_endpoint_is_configured(
    config: dict[str, Any], environ: dict[str, str], on: bool
) -> None:
    assert (otel_settings(OtelConfig.model_validate(config), environ) is not None) is on


@pytest.mark.parametrize(
    ("config", "environ", "protocol", "endpoint"),
    [
        ({}, {}, "http/protobuf", "http://localhost:4318/v1/traces"),
        ({"endpoint": "https://c.example/"}, {}, "http/protobuf", "https://c.example/v1/traces"),
        ({}, ENDPOINT, "http/protobuf", "http://collector:4318/v1/traces"),
        ({}, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c/x"}, "http/protobuf", "http://c/x"),
        ({"endpoint": "http://file:4318"}, ENDPOINT, "http/protobuf", "http://file:4318/v1/traces"),
        ({}, {}, "grpc", "http://localhost:4317"),
        ({}, ENDPOINT, "grpc", "http://collector:4318"),  # gRPC takes the address as it is
    ],
)
def test_the_endpoint_follows_the_otlp_rules(
    config: dict[str, Any], environ: dict[str, str], protocol: OtlpProtocol, endpoint: str
) -> None:
    assert traces_endpoint(OtelConfig.model_validate(config), environ, protocol) == endpoint
    if protocol == "http/protobuf":
        assert resolved(environ, enabled=True, **config).endpoint == endpoint


def test_the_environment_fills_what_the_file_leaves_unset() -> None:
    found = resolved(
        {
            **ENDPOINT,
            "OTEL_EXPORTER_OTLP_HEADERS": "api-key=a%20b%3Dc, tenant = t1 ",
            "OTEL_SERVICE_NAME": "edge",
            "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod,service.name=ignored",
            "OTEL_TRACES_SAMPLER": "traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": "0.25",
            "OTEL_BSP_MAX_QUEUE_SIZE": "64",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "2500",
        }
    )
    assert found.headers == {"api-key": "a b=c", "tenant": "t1"}
    assert found.secrets == ["a b=c", "t1"]  # redacted wherever they might show
    assert found.resource["service.name"] == "edge"
    assert found.resource["deployment.environment"] == "prod"
    assert (found.sampler, found.ratio) == ("traceidratio", 0.25)
    assert (found.max_queue_size, found.delay_ms, found.timeout_s) == (64, 200, 2.5)
    by_file = resolved(
        ENDPOINT | {"OTEL_EXPORTER_OTLP_HEADERS": "a=1", "OTEL_SERVICE_NAME": "edge"},
        headers={"b": "2"},
        service_name="gw",
        sample_ratio=0.5,
        max_queue_size=8,
        timeout_s=3,
    )
    assert by_file.headers == {"b": "2"}
    assert by_file.resource["service.name"] == "gw"
    assert (by_file.sampler, by_file.ratio) == ("parentbased_traceidratio", 0.5)
    assert (by_file.max_queue_size, by_file.timeout_s) == (8, 3)


@pytest.mark.parametrize(
    ("environ", "says"),
    [
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "not supported"),
        ({"OTEL_EXPORTER_OTLP_HEADERS": "no-equals-sign"}, "is not key=value"),
        ({"OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER"),
        ({"OTEL_TRACES_SAMPLER_ARG": "half"}, "not a number"),
        ({"OTEL_TRACES_SAMPLER_ARG": "2"}, "between 0 and 1"),
        ({"OTEL_BSP_MAX_QUEUE_SIZE": "lots"}, "whole number"),
        ({"OTEL_BSP_SCHEDULE_DELAY": "0"}, "positive"),
    ],
)
def test_a_bad_variable_stops_the_start_naming_itself(environ: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        otel_settings(OtelConfig(), ENDPOINT | environ)


def test_the_endpoint_in_the_file_is_a_url() -> None:
    with pytest.raises(ValueError, match="http"):
        OtelConfig(endpoint="collector:4318")


def test_grpc_without_its_extra_says_what_to_install() -> None:
    grpc = OtelConfig(enabled=True, protocol="grpc")
    with pytest.raises(ConfigError, match=r"toolgate\[otlp-grpc\]"):
        otel_settings(grpc, {}, grpc_exporter="toolgate_no_such_exporter")
    assert otel_settings(grpc, {}) is not None  # the dev extras install it


class Exporter(SpanExporter):
    """Refuses every batch, or holds the worker until released."""

    def __init__(self, result: SpanExportResult, hold: threading.Event | None = None) -> None:
        self.result = result
        self.hold = hold
        self.batches: list[int] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.hold is not None:
            self.hold.wait(5)
        self.batches.append(len(spans))
        return self.result


def queue(exporter: SpanExporter, size: int) -> tuple[ExportQueue, Metrics, TracerProvider]:
    metrics = Metrics()
    found = resolved({}, enabled=True, max_queue_size=size)
    export = ExportQueue(exporter, found, metrics)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(export)
    return export, metrics, provider


def dropped(metrics: Metrics, reason: str) -> float:
    value = metrics.registry.get_sample_value(
        "toolgate_otel_dropped_spans_total", {"reason": reason}
    )
    return value or 0.0


def test_spans_a_collector_refuses_are_counted() -> None:
    exporter = Exporter(SpanExportResult.FAILURE)
    export, metrics, provider = queue(exporter, 16)
    for index in range(5):
        provider.get_tracer("t").start_span(f"s{index}").end()
    assert export.force_flush(5000)
    assert sum(exporter.batches) == 5
    assert dropped(metrics, "export_failed") == 5
    assert dropped(metrics, "queue_full") == 0


def test_spans_past_a_full_queue_are_dropped_and_counted_without_waiting() -> None:
    hold = threading.Event()
    exporter = Exporter(SpanExportResult.SUCCESS, hold)
    export, metrics, provider = queue(exporter, 2)
    tracer = provider.get_tracer("t")
    for index in range(12):  # the worker is held on its first batch meanwhile
        tracer.start_span(f"s{index}").end()
    assert dropped(metrics, "queue_full") >= 8
    hold.set()
    assert export.force_flush(5000)
    exported = sum(exporter.batches)
    assert exported + dropped(metrics, "queue_full") == 12  # every span accounted for
    assert dropped(metrics, "export_failed") == 0


def test_an_unsampled_span_is_never_queued() -> None:
    exporter = Exporter(SpanExportResult.SUCCESS)
    export, _, _ = queue(exporter, 4)
    provider = TracerProvider(shutdown_on_exit=False, sampler=ALWAYS_OFF)
    provider.add_span_processor(export)
    provider.get_tracer("t").start_span("never").end()
    assert export.force_flush(5000)
    assert exporter.batches == []


def spans() -> Spans:
    tracer = TracerProvider(shutdown_on_exit=False).get_tracer("t")
    return Spans(tracer, Redactor(["sk-SECRET"]), capture_content=True, content_chars=64)


header_text = st.text(st.characters(codec="latin-1"), max_size=600)


@settings(max_examples=300, deadline=None)
@given(parent=header_text, state=header_text)
def test_any_traceparent_gives_a_valid_span(parent: str, state: str) -> None:
    """Whatever a client sends as trace context, the request gets a span with a
    valid trace id: its parent when the header is valid, else a trace of its own."""
    request = spans().request(
        "POST",
        "/v1/chat/completions",
        "http",
        {"traceparent": parent, "tracestate": state},
        None,
        "req_1",
    )
    context = request.span.get_span_context()
    assert context.is_valid
    assert len(request.trace_id) == 32
    assert request.span.kind is SpanKind.SERVER  # type: ignore[attr-defined]
    headers = request.headers
    assert headers["traceparent"].startswith(f"00-{request.trace_id}-")
    assert all(c.isprintable() and c.isascii() for c in "".join(headers.values()))
    request.finish(200, "acme", "m")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(usage=json_values)
def test_usage_of_any_shape_gives_only_counts(usage: Any) -> None:
    for value in usage_attributes(usage).values():
        assert type(value) is int
        assert value >= 0


def test_usage_counts_read_both_dialects() -> None:
    chat = {
        "prompt_tokens": 10,
        "completion_tokens": 4,
        "prompt_tokens_details": {"cached_tokens": 6},
        "completion_tokens_details": {"reasoning_tokens": 2},
    }
    responses = {"input_tokens": 10, "output_tokens": -4, "output_tokens_details": True}
    assert usage_attributes(chat) == {
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 4,
        "gen_ai.usage.cache_read.input_tokens": 6,
        "gen_ai.usage.reasoning.output_tokens": 2,
    }
    assert usage_attributes(responses) == {"gen_ai.usage.input_tokens": 10}
    assert usage_attributes({"prompt_tokens": True}) == {}


@settings(max_examples=300, deadline=None)
@given(history=st.lists(json_values, max_size=6))
def test_any_history_becomes_messages_without_raising(history: list[Any]) -> None:
    # A history is decoded where it comes in (any object a client sent), then written.
    decoded = decode_messages(m for m in history if isinstance(m, dict))
    for message in genai_messages(decoded):
        assert isinstance(message["role"], str)
        assert isinstance(message["parts"], list)


def test_captured_content_is_redacted_and_cut() -> None:
    made = spans()
    text = made.content({"words": "sk-SECRET " + "x" * 200})
    assert "sk-SECRET" not in text
    assert len(text) < 120


def test_off_the_sdk_is_not_even_imported() -> None:
    """A gateway without tracing, served a request in a fresh interpreter, never
    imports the OpenTelemetry SDK or an exporter."""
    script = """
import sys
import httpx
from starlette.testclient import TestClient
from gateway import GatewayConfig, create_app

def upstream(request):
    message = {"role": "assistant", "content": "hi"}
    return httpx.Response(200, json={"choices": [{"index": 0, "message": message}]})

config = GatewayConfig.model_validate({
    "upstreams": [{"name": "u", "base_url": "http://u.test/v1"}],
    "models": [{"name": "m", "upstream": "u"}],
})
app = create_app(config, environ={}, upstream_transport=httpx.MockTransport(upstream))
with TestClient(app) as client:
    asked = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    answer = client.post("/v1/chat/completions", json=asked)
    assert answer.status_code == 200, answer.text
    assert "x-toolgate-trace-id" not in answer.headers
loaded = [m for m in sys.modules if m.startswith(("opentelemetry.sdk", "opentelemetry.exporter"))]
print(",".join(loaded) or "none")
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "none"


def test_captured_messages_take_only_what_fits() -> None:
    """A long history is not converted whole: the messages are read lazily, each text
    cut (secrets redacted first) before it is encoded."""
    made = spans()
    taken = 0

    def endless() -> Any:
        nonlocal taken
        while True:
            taken += 1
            yield {"role": "user", "parts": [{"type": "text", "content": "x" * 10_000_000}]}

    text = made.messages(endless())
    assert taken == 1  # one message already fills the 64 characters
    assert len(text) < 200
    secret = made.messages([{"role": "user", "parts": [{"content": "a" * 50 + "sk-SECRET"}]}])
    assert "sk-SECRET" not in secret
    assert "sk-SEC" not in secret  # not even its beginning at a cut
