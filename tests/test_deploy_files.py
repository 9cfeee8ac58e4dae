"""The compose file, Prometheus and Grafana provisioning, and the Dockerfile fit
together. The Docker engine is not available on our machines; a compose CLI, where
installed, validates the file too."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway import load_config

ROOT = Path(__file__).resolve().parents[1]


def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "docker-compose.yml").read_text()))


def test_compose_runs_gateway_tools_redis_prometheus_jaeger_and_grafana() -> None:
    services = compose()["services"]
    assert set(services) == {"gateway", "example-tools", "redis", "prometheus", "jaeger", "grafana"}
    gateway = services["gateway"]
    assert gateway["build"] == "."
    config_path = gateway["command"][gateway["command"].index("--config") + 1]
    assert config_path.startswith("/app/config/")
    local = ROOT / "config" / config_path.removeprefix("/app/config/")
    config = load_config(local, env={"TOOLS_BASE_URL": gateway["environment"]["TOOLS_BASE_URL"]})
    assert config.store.url == "redis://redis:6379/0"
    tools = services["example-tools"]["command"]
    assert tools[:2] == ["toolgate", "example-tools"]
    port = tools[tools.index("--port") + 1]
    assert gateway["environment"]["TOOLS_BASE_URL"] == f"http://example-tools:{port}"
    assert {t.name for t in config.tools} == {"string_length", "add", "sqrt", "crm_lookup"}
    assert all(t.http.url.startswith("http://example-tools:9100/") for t in config.tools)
    assert config.tenants, "listening beyond loopback needs tenants"
    assert (config.server.host, config.server.port) == ("0.0.0.0", 8080)


def test_mounted_files_exist() -> None:
    for service in compose()["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            assert (ROOT / source).exists(), source


def test_prometheus_scrapes_the_gateway() -> None:
    prometheus = yaml.safe_load((ROOT / "config/prometheus/prometheus.yml").read_text())
    (job,) = prometheus["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"][0]["targets"] == ["gateway:8080"]


def test_grafana_provisions_the_datasource_and_dashboard() -> None:
    provisioning = ROOT / "config/grafana/provisioning"
    datasource = yaml.safe_load((provisioning / "datasources/prometheus.yml").read_text())
    assert datasource["datasources"][0]["url"] == "http://prometheus:9090"
    # Latency exemplars (a trace id) open the trace in the tracing backend.
    (exemplars,) = datasource["datasources"][0]["jsonData"]["exemplarTraceIdDestinations"]
    jaeger = yaml.safe_load((provisioning / "datasources/jaeger.yml").read_text())
    assert exemplars == {"name": "trace_id", "datasourceUid": jaeger["datasources"][0]["uid"]}
    dashboards = yaml.safe_load((provisioning / "dashboards/toolgate.yml").read_text())
    path = dashboards["providers"][0]["options"]["path"]
    mounts = compose()["services"]["grafana"]["volumes"]
    assert any(m.split(":")[1].startswith(path) for m in mounts)


def test_the_dockerfile_runs_as_a_user_with_a_healthcheck() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "\nUSER toolgate" in dockerfile
    assert "HEALTHCHECK" in dockerfile
    assert "/healthz" in dockerfile


def test_a_compose_cli_accepts_the_file() -> None:
    if shutil.which("docker-compose"):
        command = ["docker-compose"]
    elif (
        shutil.which("docker")
        and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0
    ):
        command = ["docker", "compose"]
    else:
        pytest.skip("no compose CLI here (docker compose or docker-compose)")
    result = subprocess.run(
        [*command, "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_the_gateway_traces_to_jaeger_and_the_dashboard_links_slow_requests() -> None:
    services = compose()["services"]
    environment = services["gateway"]["environment"]
    jaeger = yaml.safe_load(
        (ROOT / "config/grafana/provisioning/datasources/jaeger.yml").read_text()
    )["datasources"][0]
    assert environment["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://jaeger:4318"
    assert jaeger["url"] == "http://jaeger:16686"
    assert "--enable-feature=exemplar-storage" in services["prometheus"]["command"]
    dashboard = json.loads((ROOT / "config/grafana/toolgate.json").read_text())
    panels = {p["title"]: p for p in dashboard["panels"]}
    latency = panels["Request latency"]
    assert all(t["exemplar"] for t in latency["targets"])
    slow = panels["Slow requests and their traces"]
    (query,) = slow["targets"]
    assert slow["datasource"]["uid"] == jaeger["uid"]
    assert (query["queryType"], query["service"]) == ("search", environment["OTEL_SERVICE_NAME"])
    assert query["minDuration"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
