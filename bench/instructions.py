"""Instructions per request, counted by callgrind: a number that does not move with the
machine's noise, for a change whose effect the timings hide.

    python -m bench.instructions                 # this checkout
    python -m bench.instructions --tree DIR      # another checkout (a git worktree)

Each request of ``bench.trip`` (and a pass-through, no tools in play) is served
in-process (the app between ``httpx.ASGITransport`` and ``MockTransport`` fakes) by two
processes under ``valgrind --tool=callgrind``: one serves ``WARM`` requests, the other
``WARM + N``; the difference over ``N`` is one request's instructions, start-up and
warm-up cancelled out. ``PYTHONHASHSEED=0`` keeps dict and set order the same between
runs. valgrind must be installed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WARM = 10
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
    parser.add_argument("--serve", nargs=2, metavar=("NAME", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve[0], int(args.serve[1])))
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    names = [args.only] if args.only else list(scenarios())
    for name in names:
        print(f"{name}: {per_request(args.tree.resolve(), name, args.requests):,} instructions")


if __name__ == "__main__":
    main()
