"""Real uvicorn servers on free loopback ports, each in a thread with its own loop."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

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
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return bool(condition())


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_healthy(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError(f"toolgate serve did not become healthy within {START_S:g}s")


class ServeProcess:
    """``toolgate serve`` on a free port with ``config`` (a file), its output in ``log``."""

    def __init__(self, config: Path, log: Path, *options: str) -> None:
        port = str(free_port())
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self._log_file = log.open("wb")
        self.process = subprocess.Popen(
            [TOOLGATE, "serve", "--config", str(config), "--port", port, *options],
            stdout=self._log_file,
            stderr=self._log_file,
        )
        wait_healthy(self.url, self.process)

    def stop(self) -> str:
        """Stop it (SIGINT, as Ctrl-C) and return everything it wrote."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            self.process.wait(timeout=START_S)
        self._log_file.close()
        return self.log.read_text(errors="replace")
