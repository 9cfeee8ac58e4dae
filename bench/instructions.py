"""Instructions per request, counted by callgrind: a number that does not move with the
machine's noise, for a change whose effect the timings hide.

    python -m bench.instructions                 # this checkout
    python -m bench.instructions --tree DIR      # another checkout (a git worktree)
    python -m bench.instructions --own [--history TURNS]

Each request of ``bench.trip`` (and a pass-through, no tools in play) is served
in-process (the app between ``httpx.ASGITransport`` and ``MockTransport`` fakes) by two
processes under ``valgrind --tool=callgrind``: one serves ``WARM`` requests, the other
``WARM + N``; the difference over ``N`` is one request's instructions, start-up and
warm-up cancelled out. ``PYTHONHASHSEED=0`` keeps dict and set order the same between
runs. valgrind must be installed.

``--own`` counts ``bench.own``'s requests instead (a pass-through and a chat tool round,
``--history`` earlier turns before each), as the figures of docs/performance.md's
"Issue 53: where it stands" are counted: the gateway's own work, driven as raw ASGI
messages, on uvloop (the loop ``toolgate serve`` runs), its trace and run row written
with each request, the heap frozen and garbage collection off after the warm-up (the
collector's turns fall on whichever request crosses its threshold). One process per
scenario, started with callgrind's instrumentation off: ``callgrind_control`` turns it
on and zeroes it once the process is warm, and dumps it once the requests are done, so
nothing but the requests is counted (a difference of two processes carried their
start-ups' noise, some 20 million instructions). It counts only trees that have
``bench/own.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WARM = 10
OWN_WARM = 200  # bench.own's requests before the counted ones: caches filled, imports done
OWN = ("pass", "round")
PASS_THROUGH = (
    "/v1/chat/completions",
    {"messages": [{"role": "user", "content": "go"}], "toolgate": {"tools": []}},
)


def scenarios() -> dict[str, tuple[str, dict[str, Any]]]:
    from bench.trip import REQUESTS

    return {"pass-through": PASS_THROUGH, **REQUESTS}


async def serve(name: str, count: int) -> None:
    """Send ``count`` of the scenario's requests to the in-process gateway."""
    import httpx

    from bench.trip import model, tools
    from tests.gateway.test_app import completion, gateway

    def upstream(request: httpx.Request) -> httpx.Response:
        if b'"tools"' not in request.content:  # a pass-through: no tools in play
            return httpx.Response(200, json=completion({"role": "assistant", "content": "got"}))
        return model(request)

    path, body = scenarios()[name]
    async with gateway(upstream, tools) as client:
        for _ in range(count):
            response = await client.post(path, json={"model": "m", **body})
            if response.status_code != 200:
                raise SystemExit(f"{name}: {response.status_code} {response.text[:200]}")
        await asyncio.sleep(0.05)


def serve_own(which: str, history: int, count: int, signals: Path) -> None:
    """Send ``count`` of ``bench.own``'s requests between two signals, after its warm-up:
    ``ready`` is written once warm, the requests wait for ``go``, ``done`` follows them,
    and the process leaves at once on ``end`` (what a shutdown costs is no request's)."""
    import gc

    import uvloop

    from bench.own import Driver
    from gateway.surfaces import http

    # A request takes some fifty times as long under callgrind: the watch for a client
    # that left, which a request answered within WATCH_AFTER_S never starts, would.
    http.WATCH_AFTER_S = 3600.0

    def wait(name: str) -> None:
        while not (signals / name).exists():
            time.sleep(0.01)

    async def run() -> None:
        driver = Driver(which, history=history)
        async with driver.app.router.lifespan_context(driver.app):
            await driver.use_canned_wire()
            for _ in range(OWN_WARM):
                await driver.one()
            gc.collect()
            gc.freeze()
            gc.disable()
            (signals / "ready").touch()
            wait("go")
            for _ in range(count):
                await driver.one()
            (signals / "done").touch()
            wait("end")
            os._exit(0)

    uvloop.run(run())


def counted_own(tree: Path, which: str, count: int, history: int) -> int:
    """Instructions of ``count`` of ``bench.own``'s requests, counted from the moment
    they begin to the moment they end (``callgrind_control`` zeroes and dumps the
    counters of a process started with instrumentation off)."""
    with tempfile.TemporaryDirectory(prefix="toolgate-instructions-") as scratch:
        signals = Path(scratch)
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={signals}/counted.%p",
            sys.executable,
            str(Path(__file__).resolve()),
            "--serve-own",
            which,
            str(history),
            str(count),
            str(signals),
        ]
        env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": f"{tree}:{ROOT}"}
        log = signals / "stderr"

        def until(name: str) -> None:
            while not (signals / name).exists():
                if child.poll() is not None:
                    said = log.read_text(errors="replace")[-2000:]
                    raise SystemExit(f"{which}: the counted process ended:\n{said}")
                time.sleep(0.05)

        def control(*options: str) -> None:
            asked = ["callgrind_control", *options, str(child.pid)]
            subprocess.run(asked, check=True, capture_output=True)

        with log.open("wb") as stderr:
            child = subprocess.Popen(command, cwd=tree, env=env, stderr=stderr)
        try:
            until("ready")
            control("-i", "on")
            control("-z")
            (signals / "go").touch()
            until("done")
            control("-d")
            (signals / "end").touch()
            child.wait()
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        total = 0
        for dump in signals.glob(f"counted.{child.pid}.*"):  # the dumps asked for, not the last
            found = re.search(r"^totals: (\d+)", dump.read_text(), re.MULTILINE)
            if found is not None:
                total += int(found.group(1))
        if not total:
            raise SystemExit(f"{which}: callgrind dumped nothing")
        return total // count


def counted(tree: Path, name: str, count: int) -> int:
    """Instructions of a process that serves ``count`` requests of ``name``."""
    command = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        str(Path(__file__).resolve()),  # by path: an older tree may not have this file
        "--serve",
        name,
        str(count),
    ]
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": f"{tree}:{ROOT}"}
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=False)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{name}: callgrind failed:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def per_request(tree: Path, name: str, requests: int) -> int:
    return (counted(tree, name, WARM + requests) - counted(tree, name, WARM)) // requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout to count")
    parser.add_argument("--requests", type=int, default=160, help="requests counted")
    parser.add_argument("--only", help="one scenario, by name")
    parser.add_argument("--own", action="store_true", help="count bench.own's requests")
    parser.add_argument("--history", type=int, default=0, help="--own: earlier turns in each")
    parser.add_argument("--serve", nargs=2, metavar=("NAME", "COUNT"), help=argparse.SUPPRESS)
    parser.add_argument("--serve-own", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve[0], int(args.serve[1])))
        return
    if args.serve_own:
        which, history, count, signals = args.serve_own
        serve_own(which, int(history), int(count), Path(signals))
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    if args.requests < 1:
        raise SystemExit("--requests: at least one")
    tree = args.tree.resolve()
    if args.own:
        if not (tree / "bench" / "own.py").exists():
            raise SystemExit(f"{tree} has no bench/own.py to count")
        if args.only and args.only not in OWN:
            raise SystemExit(f"--own counts {' and '.join(OWN)}, not {args.only!r}")
        for name in [args.only] if args.only else OWN:
            found = counted_own(tree, name, args.requests, args.history)
            turns = f", {args.history} turns before" if args.history else ""
            print(f"{name} (bench.own{turns}): {found:,} instructions")
        return
    for name in [args.only] if args.only else list(scenarios()):
        print(f"{name}: {per_request(tree, name, args.requests):,} instructions")


if __name__ == "__main__":
    main()
