"""Reloading a running ``toolgate serve`` (docs/design.md §12): ``POST /admin/reload`` and
``SIGHUP`` swap in a new snapshot (new tools, a rotated upstream key), a bad file
keeps the old one and says why, and a reload under load fails no request."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import yaml

from tests.support.recorder import Answer, Recorder
from tests.support.scripted import MODEL, TENANT_KEY, Harness, Model, tool_then_answer
from tests.support.servers import START_S, ServeProcess

ADMIN_KEY = "admin-key-CANARY-0010"
OLD_KEY = "sk-upstream-old-CANARY-0011"
NEW_KEY = "sk-upstream-new-CANARY-0012"


def tool(name: str, url: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"The {name} tool.",
        "parameters": {"type": "object", "properties": {"s": {"type": "string"}}},
        "http": {"url": f"{url}/{name}"},
    }


def write(path: Path, upstream: str, tools_url: str, key: str, extra: list[str]) -> None:
    data = {
        "server": {"admin_key": ADMIN_KEY},
        "upstreams": [{"name": "up", "base_url": f"{upstream}/v1", "api_key": key}],
        "models": [{"name": MODEL, "upstream": "up"}],
        "tools": [tool(name, tools_url) for name in ["string_length", *extra]],
        "tenants": [{"id": "acme", "keys": [TENANT_KEY], "tools": ["*"]}],
    }
    temporary = path.with_suffix(".tmp")
    temporary.write_text(yaml.safe_dump(data))
    temporary.replace(path)  # as an operator's deploy does: the file is whole or old


def offered(model: Model, index: int = -2) -> list[str]:
    """The tools the model was offered in the ``index``-th request it received."""
    return [t["function"]["name"] for t in model.requests[index]["tools"]]


def reload(url: str, key: str | None = ADMIN_KEY) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{url}/admin/reload", headers=headers, timeout=START_S)  # loaded hosts


def start(
    harness: Harness, tmp_path: Path, *options: str
) -> tuple[Model, Path, Callable[[str, list[str]], None], ServeProcess]:
    """A scripted model, a tool, ``toolgate serve`` on a config file, and a function
    that writes that file again with another upstream key and more tools."""
    model = Model(tool_then_answer("string_length"))
    upstream = harness.serve(model.recorder).url
    tools = harness.serve(Recorder(lambda hit: Answer(body=b'{"length": 3}'))).url
    config = tmp_path / "gateway.yaml"

    def rewrite(key: str, extra: list[str]) -> None:
        write(config, upstream, tools, key, extra)

    rewrite(OLD_KEY, [])
    return model, config, rewrite, ServeProcess(config, tmp_path / "serve.log", *options)


def test_reload_brings_new_tools_and_keys_and_a_bad_file_keeps_the_old(
    harness: Harness, tmp_path: Path
) -> None:
    model, config, rewrite, served = start(harness, tmp_path)
    client = openai.OpenAI(base_url=f"{served.url}/v1", api_key=TENANT_KEY, max_retries=0)
    harness.on_close(client.close)

    def ask() -> None:
        answer = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": '{"s": "abc"}'}]
        )
        assert answer.choices[0].message.content == "done"

    try:
        ask()
        assert offered(model) == ["string_length"]
        assert model.recorder.hits[-1].headers["authorization"] == f"Bearer {OLD_KEY}"

        assert reload(served.url, None).status_code == 401
        assert reload(served.url, "wrong").status_code == 401

        config.write_text(config.read_text().replace("upstream: up", "upstream: nowhere"))
        refused = reload(served.url)
        assert refused.status_code == 422
        error = refused.json()["error"]
        assert error["code"] == "reload_failed"
        assert "unknown upstream 'nowhere'" in error["message"]
        ask()  # the old snapshot serves on
        assert model.recorder.hits[-1].headers["authorization"] == f"Bearer {OLD_KEY}"

        rewrite(NEW_KEY, ["shout"])
        done = reload(served.url)
        assert done.status_code == 200
        assert done.json()["tools"] == 2
        ask()
        assert offered(model) == ["string_length", "shout"]
        assert model.recorder.hits[-1].headers["authorization"] == f"Bearer {NEW_KEY}"

        rewrite(NEW_KEY, ["whisper"])
        served.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while True:
            ask()
            if offered(model) == ["string_length", "whisper"]:
                break
            assert time.monotonic() < deadline, "SIGHUP did not reload"
            time.sleep(0.1)

        metrics = httpx.get(f"{served.url}/metrics").text
        assert 'toolgate_config_reloads_total{result="ok"} 2.0' in metrics
        assert 'toolgate_config_reloads_total{result="error"} 1.0' in metrics
    finally:
        log = served.stop()
    assert "configuration not reloaded" in log
    for secret in (ADMIN_KEY, OLD_KEY, NEW_KEY):
        assert secret not in log


def test_a_reload_every_second_under_load_fails_no_request(
    harness: Harness, tmp_path: Path
) -> None:
    model, _, rewrite, served = start(harness, tmp_path, "--log-level", "warning")
    stop = threading.Event()
    failures: list[str] = []
    answered = [0] * 16

    def load(worker: int) -> None:
        with openai.OpenAI(
            base_url=f"{served.url}/v1", api_key=TENANT_KEY, max_retries=0, timeout=30
        ) as client:
            while not stop.is_set():
                try:
                    answer = client.chat.completions.create(
                        model=MODEL, messages=[{"role": "user", "content": '{"s": "abc"}'}]
                    )
                    assert answer.choices[0].message.content == "done"
                    answered[worker] += 1
                except Exception as exc:
                    failures.append(repr(exc))

    workers = [threading.Thread(target=load, args=(i,)) for i in range(16)]
    try:
        for worker in workers:
            worker.start()
        statuses = []
        for second in range(10):
            time.sleep(1)
            rewrite(OLD_KEY, [f"extra_{second}"])
            statuses.append(reload(served.url).status_code)
        stop.set()
        for worker in workers:
            worker.join(timeout=30)
        assert failures == []
        assert statuses == [200] * 10
        assert all(count > 0 for count in answered)
        client = openai.OpenAI(base_url=f"{served.url}/v1", api_key=TENANT_KEY)
        harness.on_close(client.close)
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": '{"s": "x"}'}]
        )
        assert offered(model) == ["string_length", "extra_9"]
    finally:
        stop.set()
        served.stop()


def test_a_reload_of_a_searched_catalog_under_load_keeps_answering(
    harness: Harness, tmp_path: Path
) -> None:
    """3,000 tools, tool search on: each reload builds a new registry and index (off
    the event loop, seconds of work) while requests go on; none fails, and a tool the
    reload brings is found by the next requests' search."""
    model = Model(tool_then_answer("string_length"))
    upstream = harness.serve(model.recorder).url
    tools = harness.serve(Recorder(lambda hit: Answer(body=b'{"length": 3}'))).url
    config = tmp_path / "gateway.yaml"
    catalog = [
        {**tool(f"svc{i % 50}_op_{i}", tools), "description": f"Operation {i} of area {i % 7}."}
        for i in range(3000)
    ]

    def rewrite(extra: list[dict[str, Any]]) -> None:
        write(config, upstream, tools, OLD_KEY, [])
        data = yaml.safe_load(config.read_text())
        data["tools"] += catalog + extra
        config.write_text(yaml.safe_dump(data))

    rewrite([])
    served = ServeProcess(config, tmp_path / "serve.log", "--log-level", "warning")
    stop = threading.Event()
    failures: list[str] = []
    answered: list[float] = []

    def load() -> None:
        with openai.OpenAI(
            base_url=f"{served.url}/v1", api_key=TENANT_KEY, max_retries=0, timeout=30
        ) as client:
            while not stop.is_set():
                try:
                    raw = client.chat.completions.with_raw_response.create(
                        model=MODEL, messages=[{"role": "user", "content": '{"s": "abc"}'}]
                    )
                    assert raw.parse().choices[0].message.content == "done"
                    assert int(raw.headers["x-toolgate-tools-offered"]) <= 33
                    answered.append(time.monotonic())
                except Exception as exc:
                    failures.append(repr(exc))

    workers = [threading.Thread(target=load) for _ in range(8)]
    try:
        for worker in workers:
            worker.start()
        windows = []
        for round_ in range(3):
            time.sleep(0.5)
            brewer = tool(f"coffee_brewer_{round_}", tools)
            rewrite([{**brewer, "description": "Brew a pot of coffee."}])
            started = time.monotonic()
            assert reload(served.url).status_code == 200
            windows.append((started, time.monotonic()))
        stop.set()
        for worker in workers:
            worker.join(timeout=30)
        assert failures == []
        for begun, ended in windows:  # requests were answered while each reload built
            assert any(begun <= at <= ended for at in answered)
        with openai.OpenAI(base_url=f"{served.url}/v1", api_key=TENANT_KEY) as client:
            client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "brew coffee"}]
            )
        assert "coffee_brewer_2" in offered(model, -1)
    finally:
        stop.set()
        served.stop()
