"""Throw-away Redis deployments for the tests, on free loopback ports: a 3-node Redis
Cluster (``redis-server --cluster-enabled yes`` + ``redis-cli --cluster create``) and
a Sentinel set (one master, one replica, one sentinel). Each runs from a temporary
folder and is stopped by PID."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import redis

from tests.support.servers import START_S, free_port, until

MISSING = (
    "redis-server and redis-cli are needed for the Redis Cluster and Sentinel tiers "
    "(Debian: apt-get install redis-server)"
)


def redis_tools() -> bool:
    return shutil.which("redis-server") is not None and shutil.which("redis-cli") is not None


def _wait(check: Callable[[], object], what: str, seconds: float = START_S) -> None:
    if until(check, bool, seconds, errors=(redis.RedisError, OSError)) is None:
        raise RuntimeError(f"{what} did not come up within {seconds:g}s")


class Deployment:
    """Redis processes in one folder, stopped together; one that fails to come up
    whole is stopped before the error is raised."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="toolgate-redis-"))
        self.processes: list[subprocess.Popen[bytes]] = []
        try:
            self._create()
        except BaseException:
            self.stop()
            raise

    def _create(self) -> None:
        """Start the deployment's processes (none for a bare folder)."""

    def _start(self, port: int, *options: str, config: Path | None = None) -> None:
        command = ["redis-server"]
        if config is not None:
            command.append(str(config))
        command += [
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.folder),
            *options,
        ]
        log = (self.folder / f"{port}.log").open("wb")
        self.processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT))
        log.close()
        client = redis.Redis(port=port, socket_connect_timeout=0.5, socket_timeout=0.5)
        try:
            _wait(client.ping, f"redis-server on port {port}")
        finally:
            client.close()

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def cluster_port() -> int:
    """A free port whose cluster bus port (10000 above) is free too: both below 65536."""
    while True:
        port = free_port()
        if port > 55535:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


class Cluster(Deployment):
    """Three masters, the 16384 slots split between them."""

    def _create(self) -> None:
        self.ports = [cluster_port() for _ in range(3)]
        for port in self.ports:
            self._start(
                port,
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                f"nodes-{port}.conf",
                "--cluster-node-timeout",
                "2000",
            )
        nodes = [f"127.0.0.1:{port}" for port in self.ports]
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *nodes,
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        for port in self.ports:
            client = redis.Redis(port=port, socket_connect_timeout=0.5, socket_timeout=0.5)

            def ready(client: redis.Redis = client) -> bool:
                return bool(client.cluster("info")["cluster_state"] == "ok")

            try:
                _wait(ready, f"the cluster node on port {port}")
            finally:
                client.close()

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.ports[0]}/0"


class SentinelSet(Deployment):
    """A master, its replica, and one sentinel watching them as ``toolgate``."""

    SERVICE = "toolgate"

    def _create(self) -> None:
        self.master, self.replica, self.sentinel = (free_port() for _ in range(3))
        self._start(self.master)
        self._start(self.replica, "--replicaof", "127.0.0.1", str(self.master))
        config = self.folder / "sentinel.conf"
        config.write_text(
            f"sentinel monitor {self.SERVICE} 127.0.0.1 {self.master} 1\n"
            f"sentinel down-after-milliseconds {self.SERVICE} 2000\n"
        )
        self._start(self.sentinel, "--sentinel", config=config)
        sentinel = redis.Redis(port=self.sentinel, socket_connect_timeout=0.5, socket_timeout=0.5)
        try:
            _wait(
                lambda: sentinel.sentinel_get_master_addr_by_name(self.SERVICE),
                "the sentinel",
            )
        finally:
            sentinel.close()

    @property
    def url(self) -> str:
        return f"redis+sentinel://127.0.0.1:{self.sentinel}/{self.SERVICE}/0"
