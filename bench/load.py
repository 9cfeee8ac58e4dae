"""One measurement: wrk when it is installed (non-streaming), else ``bench.loadgen``."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLIENT_TIMEOUT_S = 10  # a request slower than this counts as a timeout, not an answer


@dataclass(frozen=True)
class Load:
    url: str
    body: dict[str, Any]
    concurrency: int = 32
    seconds: float = 5.0
    requests: int = 0  # a fixed count instead of a duration (loadgen only)
    stream: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    pid: int = 0  # the process serving the load, whose CPU time is measured


def _lua(load: Load) -> str:
    lines = [
        'wrk.method = "POST"',
        f"wrk.body = {json.dumps(json.dumps(load.body))}",
        'wrk.headers["Content-Type"] = "application/json"',
    ]
    lines += [f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in load.headers.items()]
    return "\n".join(lines) + "\n"


_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def _ms(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return round(float(number) * _UNITS[unit], 3)


def parse_wrk(output: str) -> dict[str, Any]:
    latency = {f"p{q}": _ms(v) for q, v in re.findall(r"^\s+(50|90|99)%\s+(\S+)\s*$", output, re.M)}
    requests = int(re.search(r"(\d+) requests in", output).group(1))  # type: ignore[union-attr]
    errors = sum(int(n) for n in re.findall(r"(?:connect|read|write) (\d+)", output))
    timeouts = re.search(r"timeout (\d+)", output)
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    errors += int(non_2xx.group(1)) if non_2xx else 0
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]
    return {
        "generator": "wrk",
        "requests": requests,
        "errors": errors,
        "timeouts": int(timeouts.group(1)) if timeouts else 0,
        "rps": round(rps, 1),
        "latency_ms": latency,
    }


def measure(load: Load) -> dict[str, Any]:
    wrk = shutil.which("wrk")
    if wrk and not load.stream and not load.requests:
        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
            script.write(_lua(load))
        command = [
            wrk,
            "-t1",
            f"-c{load.concurrency}",
            f"-d{load.seconds:g}s",
            "--latency",
            f"--timeout={CLIENT_TIMEOUT_S}s",
            "-s",
            script.name,
            load.url,
        ]
        output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        Path(script.name).unlink()
        return parse_wrk(output)
    with tempfile.NamedTemporaryFile("wb", suffix=".json", delete=False) as body:
        body.write(json.dumps(load.body).encode())
    command = [
        sys.executable,
        "-m",
        "bench.loadgen",
        load.url,
        "--body-file",
        body.name,
        "--concurrency",
        str(load.concurrency),
        "--seconds",
        str(load.seconds),
        "--requests",
        str(load.requests),
        "--timeout",
        str(CLIENT_TIMEOUT_S),
    ]
    command += [f"--header={k}: {v}" for k, v in load.headers.items()]
    if load.stream:
        command.append("--stream")
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    Path(body.name).unlink()
    return json.loads(output)  # type: ignore[no-any-return]
