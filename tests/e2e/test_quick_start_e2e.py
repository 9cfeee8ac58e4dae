"""The README's quick start, run as a new user runs it: ``make run`` in the checkout
(CI's is a fresh clone) with ``UPSTREAM_BASE_URL`` pointing at a scripted model, then
the README's Python snippet: the answer needs a tool round through the example tools
that ``make run`` started, and they stop with it. And the start-up block: what the
gateway will use, and whether each answered."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from gateway.cli.main import main
from tests.support.recorder import Answer, Received, Recorder
from tests.support.scripted import Harness, Model, asks, call, says
from tests.support.servers import ServeProcess, free_port, wait_for, wait_healthy

ROOT = Path(__file__).resolve().parents[2]


def length_then_answer(body: dict[str, Any]) -> dict[str, Any]:
    last = body["messages"][-1]
    if last["role"] == "tool":
        return says(f"'toolgate' has {last['content']} characters.")
    return asks(call("string_length", {"s": "toolgate"}))


def test_make_run_ends_in_a_tool_round_through_the_example_tools(
    harness: Harness, tmp_path: Path
) -> None:
    model = Model(length_then_answer)
    upstream = harness.serve(model.recorder).url
    port, tools_port = free_port(), free_port()
    env = {
        **os.environ,
        "UPSTREAM_BASE_URL": f"{upstream}/v1",
        "TOOLGATE_PORT": str(port),
        "TOOLS_PORT": str(tools_port),
    }
    env.pop("OPENAI_API_KEY", None)
    log = (tmp_path / "make-run.log").open("wb")
    process = subprocess.Popen(
        ["make", "run"], cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
        assert wait_for(lambda: _answers(f"http://127.0.0.1:{tools_port}/"), 10)

        # The README's Python snippet, with this test's port.
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
        harness.on_close(client.close)
        raw = client.chat.completions.with_raw_response.create(
            model="default",
            messages=[{"role": "user", "content": "How many characters are in 'toolgate'?"}],
        )
        answer = raw.parse()
        assert answer.choices[0].message.content == "'toolgate' has 8 characters."
        assert raw.headers["x-toolgate-tool-calls"] == "1"
        assert model.tool_results(1) == ["8"]  # from the example tools, picked by the config
        trace = httpx.get(f"{url}/v1/toolgate/traces/{raw.headers['x-request-id']}").json()
        assert trace["tool_calls"][0]["name"] == "string_length"
        assert trace["tool_calls"][0]["outcome"] == "ok"
        # The console is on, and the key it printed signs in: the run is listed.
        said = (tmp_path / "make-run.log").read_text(errors="replace")
        printed = re.search(r"Console: (\S+) \(sign in with the key (\S+), made for", said)
        assert printed is not None, said
        assert printed.group(1) == f"{url}/console"
        _signs_in(url, printed.group(2), raw.headers["x-request-id"])
    finally:
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C in the terminal
        process.wait(timeout=20)
        log.close()
    assert not _answers(f"http://127.0.0.1:{tools_port}/")  # the example tools stopped too
    text = (tmp_path / "make-run.log").read_text(errors="replace")
    assert f"model server local at {upstream}/v1: answered" in text


def test_the_start_up_block_names_what_does_not_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    upstream, tools = free_port(), free_port()
    data = {
        "upstreams": [{"name": "local", "base_url": f"http://127.0.0.1:{upstream}/v1"}],
        "models": [{"name": "default", "upstream": "local"}],
        "tools": [{"name": "t1", "http": {"url": f"http://127.0.0.1:{tools}/t1"}}],
    }
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump(data))
    served = ServeProcess(config, tmp_path / "serve.log")
    try:
        assert wait_for(lambda: "gateway.startup" in (tmp_path / "serve.log").read_text(), 10)
        assert wait_for(lambda: _startup(tmp_path / "serve.log").__len__() == 2, 10)
    finally:
        served.stop()
    lines = _startup(tmp_path / "serve.log")
    model, tool = lines
    assert model["level"] == "warning"
    assert (
        f"model server local at http://127.0.0.1:{upstream}/v1: not reachable" in model["message"]
    )
    assert "ollama serve" in model["message"]
    assert tool["level"] == "warning"
    assert f"tools t1 at http://127.0.0.1:{tools}: not reachable" in tool["message"]

    assert main(["check", "--config", str(config), "--probe"]) == 1
    out = capsys.readouterr().out
    assert f"FAIL model server  local  http://127.0.0.1:{upstream}/v1  not reachable" in out
    assert f"FAIL tools         t1  http://127.0.0.1:{tools}  not reachable" in out
    assert "-> start one (`ollama serve`" in out


def _startup(log: Path) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    return [line for line in lines if line["logger"] == "gateway.startup"]


def _answers(url: str) -> bool:
    try:
        httpx.get(url, timeout=1)
    except httpx.TransportError:
        return False
    return True


class LoadingModel:
    """A model server as llama.cpp's is while it loads its model: every request is a
    503 ``Loading model`` until ``loaded``."""

    def __init__(self) -> None:
        self.loaded = False
        self.model = Model(says("Ready now."))

    def answer(self, hit: Received) -> Answer:
        if not self.loaded:
            body = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
            return Answer(503, json.dumps(body).encode())
        if hit.method == "GET":
            return Answer(body=b'{"object": "list", "data": []}')
        return self.model.recorder.respond(hit)


def test_a_model_server_still_loading_is_reported_as_loading(
    harness: Harness, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loading = LoadingModel()
    upstream = harness.serve(Recorder(loading.answer)).url
    data = {
        "upstreams": [{"name": "local", "base_url": f"{upstream}/v1", "max_retries": 0}],
        "models": [{"name": "default", "upstream": "local"}],
    }
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump(data))

    assert main(["check", "--config", str(config), "--probe"]) == 1
    out = capsys.readouterr().out
    assert f"LOAD model server  local  {upstream}/v1  loading: answered HTTP 503" in out
    assert "(Loading model)" in out
    assert "-> it is still loading its model" in out

    served = ServeProcess(config, tmp_path / "serve.log")
    try:

        def ready() -> dict[str, Any]:
            return dict(httpx.get(f"{served.url}/readyz").json())

        assert wait_for(lambda: ready().get("upstreams") == {"local": "loading"}, 10)
        assert ready()["status"] == "ready"  # the gateway itself is
        client = openai.OpenAI(base_url=f"{served.url}/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.InternalServerError) as failed:
            client.chat.completions.create(
                model="default", messages=[{"role": "user", "content": "hi"}]
            )
        said = failed.value.response.json()["error"]["message"]
        assert said == "The upstream model server 'local' failed: Loading model"
        loading.loaded = True
        answer = client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": "hi"}]
        )
        assert answer.choices[0].message.content == "Ready now."
        assert "upstreams" not in ready()
        client.close()
    finally:
        served.stop()
    lines = _startup(tmp_path / "serve.log")
    (model,) = [line for line in lines if line["message"].startswith("model server")]
    assert "loading" in model["message"]


def _signs_in(url: str, key: str, request_id: str) -> None:
    """Sign in to the console as a browser does, and find the run on the Runs page."""
    with httpx.Client(base_url=url, timeout=10) as browser:
        form = browser.get("/console/sign-in")
        token = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert token is not None, form.text
        signed = browser.post(
            "/console/sign-in",
            data={"csrf": token.group(1), "key": key},
            headers={"origin": url, "sec-fetch-site": "same-origin"},
        )
        assert signed.status_code == 303, signed.text
        runs = browser.get("/console/runs")
        assert runs.status_code == 200
        assert f"/console/runs/default/{request_id}" in runs.text
