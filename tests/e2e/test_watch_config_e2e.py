"""``server.watch_config``: the gateway under uvicorn follows its configuration file as
a Kubernetes ConfigMap changes it (a symlink swap of ``..data``) and as an editor does
(a tool file rewritten in place): a good edit is applied, a bad one is refused and
reported with the old configuration kept, and a request in flight finishes on the
configuration it started with."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gateway import create_app
from gateway.runtime.loader import load_config
from tests.support.recorder import Answer, Received, Recorder
from tests.support.scripted import TENANT_KEY, Harness, completion
from tests.support.servers import ServerThread, wait_for

SLOW = "take your time"


class ConfigMap:
    """A folder as the kubelet mounts a ConfigMap: the file is a symlink through
    ``..data``, which is swapped to a new folder on every update."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.version = 0
        self.path = root / "gateway.yaml"

    def write(self, data: dict[str, Any] | str) -> None:
        self.version += 1
        folder = self.root / f"..2026_11_24_{self.version:04d}"
        folder.mkdir()
        text = data if isinstance(data, str) else yaml.safe_dump(data)
        (folder / "gateway.yaml").write_text(text)
        swap = self.root / "..data_tmp"
        swap.symlink_to(folder.name)
        swap.replace(self.root / "..data")  # atomic, as the kubelet does it
        if not self.path.is_symlink():
            self.path.symlink_to("..data/gateway.yaml")


def answer(hit: Received) -> Answer:
    body = json.loads(hit.body) if hit.body else {}
    if any(m.get("content") == SLOW for m in body.get("messages", [])):
        time.sleep(1.0)  # this upstream's own thread: the gateway is not held
    model = body.get("model", "m")
    return Answer(body=json.dumps(completion({"role": "assistant", "content": model})).encode())


def config(upstream: str, models: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "server": {"watch_config": True, "watch_interval_s": 0.05},
        "upstreams": [{"name": "up", "base_url": f"{upstream}/v1"}],
        "models": [{"name": name, "upstream": "up"} for name in models],
        "tenants": [
            {"id": "acme", "keys": [TENANT_KEY], "tools": ["*"] if "tool_files" in extra else []}
        ],
        **extra,
    }


def listed(gateway: ServerThread) -> list[str]:
    headers = {"authorization": f"Bearer {TENANT_KEY}"}
    body = httpx.get(f"{gateway.url}/v1/models", headers=headers).json()
    return sorted(model["id"] for model in body["data"])


def reloads(gateway: ServerThread, result: str) -> float:
    text = httpx.get(f"{gateway.url}/metrics").text
    prefix = f'toolgate_config_reloads_total{{result="{result}"}} '
    return next(float(line[len(prefix) :]) for line in text.splitlines() if line.startswith(prefix))


def test_a_configmap_update_is_applied_and_a_bad_one_refused(
    harness: Harness, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    upstream = harness.serve(Recorder(answer)).url
    mount = ConfigMap(tmp_path)
    mount.write(config(upstream, ["first"]))
    gateway = harness.serve(create_app(load_config(mount.path), config_path=mount.path))
    assert listed(gateway) == ["first"]

    # A request in flight when the file changes finishes on its own configuration.
    finished: list[httpx.Response] = []
    slow = threading.Thread(
        target=lambda: finished.append(
            httpx.post(
                f"{gateway.url}/v1/chat/completions",
                headers={"authorization": f"Bearer {TENANT_KEY}"},
                json={"model": "first", "messages": [{"role": "user", "content": SLOW}]},
                timeout=10,
            )
        )
    )
    slow.start()
    time.sleep(0.3)
    mount.write(config(upstream, ["second", "third"]))
    assert wait_for(lambda: listed(gateway) == ["second", "third"], 5)
    slow.join(5)
    assert finished[0].status_code == 200
    assert finished[0].json()["choices"][0]["message"]["content"] == "first"
    assert reloads(gateway, "ok") == 1

    # A file that does not load keeps the old configuration, and says so.
    with caplog.at_level("ERROR", "gateway.runtime"):
        mount.write(config(upstream, ["fourth"]) | {"models": [{"name": "x", "upstream": "nope"}]})
        assert wait_for(lambda: reloads(gateway, "error") == 1, 5)
    assert listed(gateway) == ["second", "third"]
    assert any("configuration not reloaded" in r.getMessage() for r in caplog.records)
    mount.write("upstreams: [")  # not even YAML
    assert wait_for(lambda: reloads(gateway, "error") == 2, 5)
    assert listed(gateway) == ["second", "third"]

    mount.write(config(upstream, ["fifth"]))  # and the next good one is applied
    assert wait_for(lambda: listed(gateway) == ["fifth"], 5)
    assert reloads(gateway, "ok") == 2


def test_a_tool_file_edited_in_place_is_followed(harness: Harness, tmp_path: Path) -> None:
    upstream = harness.serve(Recorder(answer)).url
    tools = tmp_path / "tools"
    tools.mkdir()

    def tool(name: str) -> dict[str, Any]:
        return {"name": name, "http": {"url": "http://127.0.0.1:9/x"}}

    (tools / "a.yaml").write_text(yaml.safe_dump({"tools": [tool("alpha")]}))
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config(upstream, ["m"], tool_files=["tools/*.yaml"])))
    app = create_app(load_config(path), config_path=path)
    gateway = harness.serve(app)

    def tools_now() -> list[str]:
        return sorted(app.state.gateway.runtime.registry.names)

    assert tools_now() == ["alpha"]
    (tools / "a.yaml").write_text(yaml.safe_dump({"tools": [tool("alpha"), tool("beta")]}))
    assert wait_for(lambda: tools_now() == ["alpha", "beta"], 5)
    (tools / "b.yaml").write_text(yaml.safe_dump({"tools": [tool("gamma")]}))  # a new file
    assert wait_for(lambda: tools_now() == ["alpha", "beta", "gamma"], 5)
    assert reloads(gateway, "ok") == 2


def test_without_watch_config_nothing_is_followed(harness: Harness, tmp_path: Path) -> None:
    upstream = harness.serve(Recorder(answer)).url
    path = tmp_path / "gateway.yaml"
    data = config(upstream, ["first"])
    data["server"] = {"watch_config": False}
    path.write_text(yaml.safe_dump(data))
    gateway = harness.serve(create_app(load_config(path), config_path=path))
    path.write_text(yaml.safe_dump(config(upstream, ["second"])))
    time.sleep(0.5)
    assert listed(gateway) == ["first"]
