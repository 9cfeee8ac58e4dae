"""OpenTelemetry collectors for the tests, on loopback: OTLP/HTTP (``OtlpReceiver``, an
ASGI app) and OTLP/gRPC (``GrpcCollector``, a grpcio server), the protobuf wire format
decoded with opentelemetry-proto, every span kept as it arrived."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from starlette.types import Receive, Scope, Send

from tests.support.recorder import read_all
from tests.support.servers import wait_for

# Span kinds as OTLP numbers them.
INTERNAL, SERVER, CLIENT = 1, 2, 3
STATUS_ERROR = 2


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(v) for v in value.array_value.values]
    if kind is None:
        return None
    return getattr(value, kind)


def attributes_of(pairs: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    pair: KeyValue
    for pair in pairs:
        found[pair.key] = value_of(pair.value)
    return found


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_id: str  # empty for a root
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    status: int
    resource: dict[str, Any]
    start_ns: int
    end_ns: int


def decode(request: ExportTraceServiceRequest) -> list[ReceivedSpan]:
    """The spans of one export, as they came."""
    received = []
    for resource_spans in request.resource_spans:
        resource = attributes_of(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                received.append(
                    ReceivedSpan(
                        span.name,
                        span.kind,
                        span.trace_id.hex(),
                        span.span_id.hex(),
                        span.parent_span_id.hex(),
                        attributes_of(span.attributes),
                        [(e.name, attributes_of(e.attributes)) for e in span.events],
                        span.status.code,
                        resource,
                        span.start_time_unix_nano,
                        span.end_time_unix_nano,
                    )
                )
    return received


class OtlpReceiver:
    """Serves ``POST /v1/traces``; ``spans`` holds what came, ``fail`` makes it refuse."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.headers: list[dict[str, str]] = []
        self.fail = False
        self._lock = threading.Lock()

    def of_trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def tool_span_of(self, trace_id: str) -> None:
        """Wait until a tool call's span of ``trace_id`` has come (spans are exported
        in batches, after the answer)."""
        came = wait_for(
            lambda: any(s.name.startswith("execute_tool") for s in self.of_trace(trace_id))
        )
        assert came, "the tool call's span never came"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = await read_all(receive)
        if scope["path"] != "/v1/traces" or self.fail:
            await send({"type": "http.response.start", "status": 503, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        received = decode(ExportTraceServiceRequest.FromString(body))
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        with self._lock:
            self.spans += received
            self.headers.append(headers)
        answer = ExportTraceServiceResponse().SerializeToString()
        start = {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/x-protobuf")],
        }
        await send(start)
        await send({"type": "http.response.body", "body": answer})


class GrpcCollector:
    """OTLP/gRPC: the ``TraceService`` on a free loopback port, until ``stop``."""

    def __init__(self) -> None:
        import grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

        self.spans: list[ReceivedSpan] = []
        self.metadata: list[dict[str, str]] = []
        self._lock = threading.Lock()
        collector = self

        class Service(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(
                self, request: ExportTraceServiceRequest, context: Any
            ) -> ExportTraceServiceResponse:
                with collector._lock:
                    collector.spans += decode(request)
                    collector.metadata.append(dict(context.invocation_metadata()))
                return ExportTraceServiceResponse()

        self._server = grpc.server(ThreadPoolExecutor(max_workers=2))
        add = trace_service_pb2_grpc.add_TraceServiceServicer_to_server
        add(Service(), self._server)  # type: ignore[no-untyped-call]
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    def of_trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def stop(self) -> None:
        self._server.stop(grace=None)
