"""Starting and watching the benchmark's processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[bytes], seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} after {seconds}s")


class Processes:
    """Child processes that are all stopped together."""

    def __init__(self, log_dir: Path) -> None:
        self._log_dir = log_dir
        self._children: list[subprocess.Popen[bytes]] = []
        self._pids: dict[str, int] = {}

    def start(
        self, name: str, args: list[str], port: int, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        log = open(self._log_dir / f"{name}.log", "wb")  # noqa: SIM115 - closed with the child
        process = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
        self._children.append(process)
        self._pids[name] = process.pid
        wait_for_port(port, process)
        return process

    def pid(self, name: str) -> int:
        return self._pids[name]

    def python(
        self, name: str, module_args: list[str], port: int, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        return self.start(name, [sys.executable, "-m", *module_args], port, env)

    def stop(self) -> None:
        for process in self._children:
            process.terminate()
        for process in self._children:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


def redis_server(port: int) -> list[str]:
    """A redis-server of the bench's own on ``port``: loopback only, nothing on disk."""
    return [
        "redis-server",
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
    ]


def memory_kib(pid: int) -> dict[str, int]:
    """Resident set size now and at its peak, from /proc."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0])
    return {"rss_kib": values.get("VmRSS", 0), "peak_rss_kib": values.get("VmHWM", 0)}


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")
