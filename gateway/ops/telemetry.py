"""OpenTelemetry tracing as configured (docs/design.md §14).

``otel_settings`` reads the ``otel:`` section and the standard ``OTEL_*`` environment
variables (a field set in the file wins) and says whether tracing is on at all. Off,
nothing of the SDK is imported and no request pays for it; on, ``ops.export`` (imported
then) opens the app's tracer provider and its export.
"""

from __future__ import annotations

import importlib.util
import os
import socket
from collections.abc import Mapping
from dataclasses import field
from urllib.parse import unquote

from gateway.config import OtelConfig, OtlpProtocol
from gateway.errors import ConfigError
from tool_registry import immutable

VERSION = "0.1.0"
DEFAULT_HTTP_ENDPOINT = "http://localhost:4318"
DEFAULT_GRPC_ENDPOINT = "http://localhost:4317"
TRACES_PATH = "/v1/traces"
GRPC_EXPORTER = "opentelemetry.exporter.otlp.proto.grpc"  # the ``otlp-grpc`` extra
DEFAULT_QUEUE = 2048
DEFAULT_DELAY_MS = 5000
_PROTOCOLS: tuple[OtlpProtocol, ...] = ("http/protobuf", "grpc")
_SAMPLERS = (
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
)


@immutable
class OtelSettings:
    """Tracing as configured, every value resolved."""

    endpoint: str  # the traces URL (HTTP), or the collector's address (gRPC)
    protocol: OtlpProtocol
    headers: dict[str, str]
    resource: dict[str, str]  # service.name among them
    sampler: str  # one of ``_SAMPLERS``
    ratio: float  # for the ratio samplers
    timeout_s: float | None
    max_queue_size: int
    delay_ms: int
    capture_content: bool = False
    content_chars: int = 4096
    secrets: list[str] = field(default_factory=list)  # header values, for the redactor

    def describe(self) -> str:
        """One line for operators: where spans go and which are kept."""
        sampler = self.sampler + (f" {self.ratio:g}" if "ratio" in self.sampler else "")
        content = ", with content" if self.capture_content else ""
        return f"OTLP {self.protocol} to {self.endpoint} (sampler {sampler}{content})"


def _truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() == "true"


def _pairs(value: str, variable: str) -> dict[str, str]:
    """``k1=v1,k2=v2`` (percent-encoded), as ``OTEL_*_HEADERS`` and
    ``OTEL_RESOURCE_ATTRIBUTES`` write them."""
    found: dict[str, str] = {}
    for item in value.split(","):
        if not item.strip():
            continue
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{variable}: {item.strip()!r} is not key=value")
        found[unquote(key.strip())] = unquote(val.strip())
    return found


def _number(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}: {raw!r} is not a whole number") from None
    if value <= 0:
        raise ConfigError(f"{name}: must be positive")
    return value


def _enabled(config: OtelConfig, environ: Mapping[str, str]) -> bool:
    if config.enabled is not None:
        return config.enabled
    if _truthy(environ.get("OTEL_SDK_DISABLED")):
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return bool(
        config.endpoint
        or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def _protocol(config: OtelConfig, environ: Mapping[str, str]) -> OtlpProtocol:
    if config.protocol is not None:
        return config.protocol
    raw = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    for protocol in _PROTOCOLS:
        if raw == protocol:
            return protocol
    raise ConfigError(
        f"OTEL_EXPORTER_OTLP_PROTOCOL: {raw!r} is not supported (http/protobuf or grpc)"
    )


def traces_endpoint(config: OtelConfig, environ: Mapping[str, str], protocol: OtlpProtocol) -> str:
    """The HTTP traces URL (a base URL gets ``/v1/traces``; the signal's own variable
    is used as it is), or the gRPC collector's address."""
    grpc = protocol == "grpc"
    if config.endpoint is not None:
        base = config.endpoint
    else:
        signal = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        if signal:
            return signal
        base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or (
            DEFAULT_GRPC_ENDPOINT if grpc else DEFAULT_HTTP_ENDPOINT
        )
    return base if grpc else base.rstrip("/") + TRACES_PATH


def _sampler(config: OtelConfig, environ: Mapping[str, str]) -> tuple[str, float]:
    if config.sample_ratio is not None:
        return "parentbased_traceidratio", config.sample_ratio
    name = environ.get("OTEL_TRACES_SAMPLER", "parentbased_always_on").strip().lower()
    if name not in _SAMPLERS:
        raise ConfigError(f"OTEL_TRACES_SAMPLER: {name!r} is not one of {', '.join(_SAMPLERS)}")
    raw = environ.get("OTEL_TRACES_SAMPLER_ARG", "1.0")
    try:
        ratio = float(raw)
    except ValueError:
        raise ConfigError(f"OTEL_TRACES_SAMPLER_ARG: {raw!r} is not a number") from None
    if not 0.0 <= ratio <= 1.0:
        raise ConfigError("OTEL_TRACES_SAMPLER_ARG: must be between 0 and 1")
    return name, ratio


def otel_settings(
    config: OtelConfig, environ: Mapping[str, str], *, grpc_exporter: str = GRPC_EXPORTER
) -> OtelSettings | None:
    """Tracing as the file and the environment say, or None when it is off. gRPC needs
    the module ``grpc_exporter`` (the extra's), looked for now: its absence stops the
    start rather than the first export."""
    if not _enabled(config, environ):
        return None
    protocol = _protocol(config, environ)
    if protocol == "grpc" and importlib.util.find_spec(grpc_exporter) is None:
        raise ConfigError(
            "otel.protocol grpc needs the gRPC exporter: pip install 'toolgate[otlp-grpc]'"
        )
    headers = dict(config.headers)
    if not headers:
        raw = environ.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS") or environ.get(
            "OTEL_EXPORTER_OTLP_HEADERS", ""
        )
        headers = _pairs(raw, "OTEL_EXPORTER_OTLP_HEADERS")
    resource = _pairs(environ.get("OTEL_RESOURCE_ATTRIBUTES", ""), "OTEL_RESOURCE_ATTRIBUTES")
    service = config.service_name or environ.get("OTEL_SERVICE_NAME")
    resource["service.name"] = service or resource.get("service.name") or "toolgate"
    resource.setdefault("service.version", VERSION)
    resource.setdefault("service.instance.id", f"{socket.gethostname()}-{os.getpid()}")
    sampler, ratio = _sampler(config, environ)
    timeout = config.timeout_s
    if timeout is None and environ.get("OTEL_EXPORTER_OTLP_TIMEOUT"):
        timeout = _number(environ, "OTEL_EXPORTER_OTLP_TIMEOUT", 10000) / 1000
    return OtelSettings(
        endpoint=traces_endpoint(config, environ, protocol),
        protocol=protocol,
        headers=headers,
        resource=resource,
        sampler=sampler,
        ratio=ratio,
        timeout_s=timeout,
        max_queue_size=config.max_queue_size
        or _number(environ, "OTEL_BSP_MAX_QUEUE_SIZE", DEFAULT_QUEUE),
        delay_ms=_number(environ, "OTEL_BSP_SCHEDULE_DELAY", DEFAULT_DELAY_MS),
        capture_content=config.capture_content,
        content_chars=config.content_chars,
        secrets=[value for value in headers.values() if value],
    )
