"""The ``toolgate`` console script, run as an operator would."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.fake_upstream import FakeUpstream, say
from tests.support.servers import (
    TOOLGATE,
    ServeProcess,
    ServerThread,
    free_port,
    until,
    wait_for,
    wait_healthy,
)


@pytest.fixture
def upstream() -> Iterator[tuple[FakeUpstream, ServerThread]]:
    fake = FakeUpstream(lambda body: say("served"))
    with ServerThread(fake.app()) as server:
        yield fake, server


def write_config(tmp_path: Path, upstream_url: str) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(
        f"upstreams: [{{name: up, base_url: '{upstream_url}/v1'}}]\n"
        "models: [{name: m, upstream: up}]\n"
    )
    return path


@pytest.mark.parametrize("workers", [1, 2])
def test_serve_answers_and_stops_cleanly(
    tmp_path: Path, upstream: tuple[FakeUpstream, ServerThread], workers: int
) -> None:
    fake, server = upstream
    config = write_config(tmp_path, server.url)
    with ServeProcess(config, tmp_path / "log", "--workers", str(workers)) as served:
        url = served.url
        with openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0) as client:
            for _ in range(workers * 2):
                answer = client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}]
                )
                assert answer.choices[0].message.content == "served"
        assert len(fake.requests) == workers * 2
        for _ in range(20):  # a new connection each: the workers share them out
            response = httpx.post(
                f"{url}/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            )
            assert response.status_code == 200
        # One scrape counts every request once, whichever worker answered it.
        exposition = httpx.get(f"{url}/metrics").text
        counted = sum(
            sample.value
            for family in text_string_to_metric_families(exposition)
            if family.name == "toolgate_requests"
            for sample in family.samples
            if sample.name == "toolgate_requests_total"
        )
        assert counted == workers * 2 + 20
    output = served.stop()
    assert served.process.returncode == 0, output
    assert "Traceback" not in output


STARVED_S = 7.0  # past uvicorn's own worker health check (5 s)


@pytest.mark.parametrize(("healthcheck_s", "survive"), [(None, True), (2, False)])
def test_workers_starved_as_they_start_are_waited_for(
    tmp_path: Path, upstream: tuple[FakeUpstream, ServerThread], healthcheck_s: int | None,
    survive: bool,
) -> None:  # fmt: skip
    """A host short of CPU: each worker is stopped (no CPU at all) as soon as it exists,
    for longer than uvicorn's own 5 s health check, which killed such workers as they
    started, in a loop. At the default (``server.worker_healthcheck_s``, 60 s) they are
    waited for and serve; at 2 s the supervisor replaces them (the setting is what
    holds)."""
    _, server = upstream
    config = write_config(tmp_path, server.url)
    if healthcheck_s is not None:
        config.write_text(
            config.read_text() + f"server: {{worker_healthcheck_s: {healthcheck_s}}}\n"
        )
    with ServeStarving(config, tmp_path / "log") as served:
        first = set(served.stopped)
        time.sleep(STARVED_S)  # the starvation itself, not a wait for something
        if survive:
            served.resume()
            wait_healthy(served.url, served.process)
            assert served.workers() == first  # the same two: none was killed
            response = httpx.post(
                f"{served.url}/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            )
            assert response.status_code == 200
        else:
            replaced = until(served.workers, lambda now: len(now) == 2 and not now & first)
            served.resume()
            assert replaced, "the supervisor kept workers that did not answer its pings"
    assert served.stop() is not None


class ServeStarving(ServeProcess):
    """``toolgate serve --workers 2`` whose workers are each stopped (SIGSTOP) the
    moment they appear, until ``resume()``."""

    def __init__(self, config: Path, log: Path) -> None:
        self.stopped: set[int] = set()
        self._watching = True
        self._watch = threading.Thread(target=self._stop_new_workers, daemon=True)
        super().__init__(config, log, "--workers", "2", healthy=False)
        self._watch.start()
        assert wait_for(lambda: len(self.stopped) >= 2), "no workers appeared"

    def _stop_new_workers(self) -> None:
        while self._watching and self.process.poll() is None:
            for pid in self.workers() - self.stopped:
                os.kill(pid, signal.SIGSTOP)
                self.stopped.add(pid)
            time.sleep(0.005)

    def resume(self) -> None:
        self._watching = False
        self._watch.join()
        for pid in self.stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def stop(self, how: signal.Signals = signal.SIGINT) -> str:
        self.resume()
        return super().stop(how)


def test_open_mode_refuses_a_public_address(
    tmp_path: Path, upstream: tuple[FakeUpstream, ServerThread]
) -> None:
    _, server = upstream
    result = subprocess.run(
        [
            TOOLGATE,
            "serve",
            "--config",
            str(write_config(tmp_path, server.url)),
            "--host",
            "0.0.0.0",
            "--port",
            str(free_port()),
        ],
        capture_output=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert b"no tenants configured" in result.stderr


def test_check_exits_non_zero_on_an_invalid_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("upstreams: []\nmodels: []\n")
    result = subprocess.run([TOOLGATE, "check", "--config", str(path)], capture_output=True)
    assert result.returncode == 2
    assert b"upstreams" in result.stderr
    example = Path(__file__).resolve().parents[2] / "config" / "gateway.yaml"
    result = subprocess.run([TOOLGATE, "check", "--config", str(example)], capture_output=True)
    assert result.returncode == 0, result.stderr


def test_check_says_when_no_key_can_sign_in_to_the_console(tmp_path: Path) -> None:
    """Issue 52 §7: the console on, and no operator's key: check says so, and what to set."""
    base = (
        "upstreams: [{name: up, base_url: 'http://127.0.0.1:9/v1'}]\n"
        "models: [{name: m, upstream: up}]\n"
        "console: {enabled: true}\n"
    )
    path = tmp_path / "console.yaml"
    path.write_text(base)
    result = subprocess.run(
        [TOOLGATE, "check", "--offline", "--config", str(path)], capture_output=True
    )
    said = result.stdout + result.stderr
    assert b"no key can sign in to the console" in said
    assert b"server.admin_key" in said
    path.write_text(base + "server: {admin_key: sk-admin-x1234}\n")
    result = subprocess.run(
        [TOOLGATE, "check", "--offline", "--config", str(path)], capture_output=True
    )
    assert b"sign in" not in result.stdout + result.stderr


def test_sigterm_lets_a_stream_in_flight_finish(tmp_path: Path) -> None:
    """What the Kubernetes manifests rely on (``deploy/kubernetes``): on SIGTERM the
    gateway stops taking new connections and finishes the streams it is serving
    before it exits."""
    words = " ".join(f"w{i}" for i in range(12))
    fake = FakeUpstream(lambda body: say(words), word_delay_s=0.1)
    with ServerThread(fake.app()) as server:
        port = free_port()
        process = subprocess.Popen(
            [
                TOOLGATE,
                "serve",
                "--config",
                str(write_config(tmp_path, server.url)),
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        with process:
            url = f"http://127.0.0.1:{port}"
            wait_healthy(url, process)
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
            with httpx.stream(
                "POST", f"{url}/v1/chat/completions", json=body, timeout=20
            ) as answer:
                lines = answer.iter_lines()
                first = next(line for line in lines if line.startswith("data: "))
                process.send_signal(signal.SIGTERM)  # mid-stream
                rest = list(lines)
            process.wait(timeout=20)
            # uvicorn exits by the signal it was stopped with, once it has drained
            assert process.returncode in (0, -signal.SIGTERM)
    assert first.startswith("data: {")
    assert "data: [DONE]" in rest
    text = "".join(
        json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in [first, *rest]
        if line.startswith("data: {") and json.loads(line[6:]).get("choices")
    )
    assert text.split() == words.split()  # every word, none cut off
