"""Reloading without a network: a worker of several refuses (SIGHUP to the supervisor
is the way there), a gateway built without a file says so, a bad file keeps the old
snapshot and its metric counts."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gateway import GatewayConfig, load_config
from gateway.runtime.services import Gateway

pytestmark = pytest.mark.anyio

CONFIG = {
    "upstreams": [{"name": "u", "base_url": "http://127.0.0.1:9/v1"}],
    "models": [{"name": "m", "upstream": "u"}],
    "tools": [{"name": "t1", "http": {"url": "http://127.0.0.1:9/t1"}}],
}


def gateway(tmp_path: Path) -> tuple[Gateway, Path]:
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    return Gateway(load_config(path), config_path=path), path


async def test_a_worker_of_several_refuses_and_says_what_to_do(tmp_path: Path) -> None:
    made, _ = gateway(tmp_path)
    made.runtimes.one_of_workers = True
    result = await made.runtimes.reload()
    assert not result.ok
    assert "send SIGHUP to the main process" in result.message


async def test_without_a_file_there_is_nothing_to_reload() -> None:
    made = Gateway(GatewayConfig.model_validate(CONFIG))
    result = await made.runtimes.reload()
    assert "not started from a configuration file" in result.message


async def test_a_bad_file_keeps_the_old_snapshot(tmp_path: Path) -> None:
    made, path = gateway(tmp_path)
    before = made.runtime
    path.write_text("upstreams: [")
    result = await made.runtimes.reload()
    assert not result.ok
    assert "invalid YAML" in result.message
    assert made.runtime is before
    path.write_text(yaml.safe_dump({**CONFIG, "tools": []}))
    assert (await made.runtimes.reload()).ok
    assert made.runtime is not before
    assert "t1" not in made.runtime.registry
    exposed = made.metrics.exposition()[0].decode()
    assert 'toolgate_config_reloads_total{result="error"} 1.0' in exposed
    assert 'toolgate_config_reloads_total{result="ok"} 1.0' in exposed
