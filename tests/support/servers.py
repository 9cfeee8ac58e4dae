"""Real uvicorn servers on free loopback ports, each in a thread with its own loop."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx
import uvicorn
from starlette.types import ASGIApp

from gateway.cli.protocol import EnvelopeHttpToolsProtocol

T = TypeVar("T")

TOOLGATE = str(Path(sys.executable).parent / "toolgate")
# The most a server, a process or a condition is waited for. Waits end as soon as what
# they wait on holds (or, for a process, as soon as it has died): the bound is for a
# crowded machine, where starting a process may take many times what it takes alone.
START_S = 120.0
WAIT_S = 30.0


class ServerThread:
    """Serves an ASGI app on ``127.0.0.1`` on a free port (or ``port``) until stopped,
    with the HTTP protocol ``toolgate serve`` runs."""

    def __init__(self, app: ASGIApp, host: str = "127.0.0.1", port: int = 0) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.host = host
        self.port: int = self._socket.getsockname()[1]
        config = uvicorn.Config(
            app,
            lifespan="on",
            log_level="warning",
            access_log=False,
            http=EnvelopeHttpToolsProtocol,
        )
        self._server = uvicorn.Server(config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(),), daemon=True)

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self._server.serve(sockets=[self._socket])

    def call(self, function: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run ``function()`` on the server's event loop and return its result."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(function(), self._loop).result(timeout=WAIT_S)

    def task_count(self) -> int:
        """How many asyncio tasks the server's loop holds."""

        async def count() -> int:
            return len(asyncio.all_tasks())

        return self.call(count)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + START_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=WAIT_S)
        self._socket.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def wait_for(condition: Callable[[], object], seconds: float = WAIT_S) -> bool:
    """Poll ``condition`` until it holds or ``seconds`` pass; whether it held."""
    return until(condition, bool, seconds) is not None


def until(
    ask: Callable[[], T],
    ready: Callable[[T], object] = bool,
    seconds: float = WAIT_S,
    errors: tuple[type[BaseException], ...] = (),
) -> T | None:
    """Ask until the answer is ``ready`` (an error of ``errors`` counts as not yet), at
    most ``seconds``: the answer once ready, else None. The one poll of the tests."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            answer = ask()
        except errors:
            pass
        else:
            if ready(answer):
                return answer
        if time.monotonic() > deadline:
            return None
        time.sleep(0.02)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _healthy(url: str, process: subprocess.Popen[bytes]) -> bool:
    if process.poll() is not None:
        raise ProcessDied(process.returncode)
    try:
        return httpx.get(f"{url}/healthz").status_code == 200
    except httpx.TransportError:
        return False


class ProcessDied(AssertionError):
    """The process waited for ended first."""


def wait_healthy(url: str, process: subprocess.Popen[bytes]) -> None:
    """Until ``url/healthz`` answers 200; an AssertionError when ``process`` dies first
    (with what it wrote on a pipe) or after ``START_S``."""
    try:
        healthy = wait_for(lambda: _healthy(url, process), START_S)
    except ProcessDied as died:
        output = process.stderr.read().decode() if process.stderr else ""
        raise AssertionError(f"it ended ({died}) before it was healthy: {output}") from None
    assert healthy, f"{url} was not healthy within {START_S:g}s"


class ServeProcess:
    """``toolgate serve`` on a free port with ``config`` (a file), its output in ``log``,
    in a session of its own: stopped with all its workers, even when it never became
    healthy (a test whose wait failed leaks no gateway into the next)."""

    def __init__(
        self,
        config: Path,
        log: Path,
        *options: str,
        env: dict[str, str] | None = None,
        healthy: bool = True,
    ) -> None:
        """Started, and (``healthy``) waited for until it answers."""
        port = str(free_port())
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self._log_file = log.open("wb")
        self.process = subprocess.Popen(
            [TOOLGATE, "serve", "--config", str(config), "--port", port, *options],
            stdout=self._log_file,
            stderr=self._log_file,
            env=env,
            start_new_session=True,
        )
        if not healthy:
            return
        try:
            wait_healthy(self.url, self.process)
        except BaseException as failed:
            self.kill()
            failed.add_note(self.log.read_text(errors="replace")[-4000:])
            raise

    def workers(self) -> set[int]:
        """The worker processes it runs now (``--workers N``), by PID."""
        pid = self.process.pid
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            return set()
        found = set()
        for child in children:
            try:
                command = Path(f"/proc/{child}/cmdline").read_bytes()
            except OSError:
                continue
            if b"spawn_main" in command:  # not multiprocessing's resource tracker
                found.add(int(child))
        return found

    def stop(self, how: signal.Signals = signal.SIGINT) -> str:
        """Stop it (SIGINT, as Ctrl-C) and return everything it wrote; killed, with its
        workers, if it has not ended within ``START_S``."""
        if self.process.poll() is None:
            self.process.send_signal(how)
            try:
                self.process.wait(timeout=START_S)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log_file.close()
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        """Kill it and every process of its session at once."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self._log_file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def in_flight(url: str) -> float:
    """Requests the gateway at ``url`` is serving, by its metrics."""
    text = httpx.get(f"{url}/metrics").text
    found = re.search(r"^toolgate_requests_in_flight (\S+)$", text, re.MULTILINE)
    assert found is not None, "no toolgate_requests_in_flight in /metrics"
    return float(found.group(1))


def requests_ended(url: str) -> None:
    """Until no request is in flight at ``url``: a request is counted out only once its
    end is done (its usage charged, its budget settled, its turns kept), which may be
    after its client had the whole answer."""
    assert wait_for(lambda: in_flight(url) == 0), f"a request at {url} did not end"
