"""A fixed-concurrency HTTP load generator, run in its own process.

    python -m bench.loadgen URL --body-file F [--concurrency 32] [--seconds 5 | --requests N]
                            [--header 'k: v'] [--stream]

Prints one JSON object: requests, errors, seconds, rps, latency percentiles (ms), and
for ``--stream`` the time to first token and the gaps between content chunks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

# The fake upstream's tokens are "t0 ", "t1 ", …: a chat chunk carries them as content,
# a Responses event as an output_text delta.
TOKEN_MARKERS = (b'"content":"t', b'"delta":"t')


def _token(chunk: bytes) -> bool:
    return any(marker in chunk for marker in TOKEN_MARKERS)


@dataclass
class Stats:
    latencies: list[float] = field(default_factory=list)
    ttfts: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)
    errors: int = 0
    timeouts: int = 0
    started: int = 0


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(int(q * len(ordered)), len(ordered) - 1)] * 1000, 3)

    return {"p50": at(0.50), "p90": at(0.90), "p99": at(0.99), "max": at(1.0)}


async def _one(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: dict[str, str],
    stream: bool,
    stats: Stats,
) -> None:
    started = time.perf_counter()
    try:
        async with session.post(url, data=body, headers=headers) as response:
            if stream:
                first = last = None
                async for chunk in response.content.iter_any():
                    now = time.perf_counter()
                    if first is None:
                        if _token(chunk):
                            first = last = now
                            stats.ttfts.append(now - started)
                    elif _token(chunk) and last is not None:
                        stats.gaps.append(now - last)
                        last = now
            else:
                await response.read()
            if response.status != 200:
                stats.errors += 1
                return
    except TimeoutError:
        stats.timeouts += 1
        return
    except aiohttp.ClientError:
        stats.errors += 1
        return
    stats.latencies.append(time.perf_counter() - started)


async def _worker(
    args: argparse.Namespace,
    session: aiohttp.ClientSession,
    body: bytes,
    headers: dict[str, str],
    stats: Stats,
    stop_at: float,
) -> None:
    while time.perf_counter() < stop_at:
        if args.requests and stats.started >= args.requests:
            return
        stats.started += 1
        await _one(session, args.url, body, headers, args.stream, stats)


async def load(args: argparse.Namespace, body: bytes) -> dict[str, Any]:
    headers = {"content-type": "application/json"}
    for header in args.header:
        name, _, value = header.partition(":")
        headers[name.strip()] = value.strip()
    stats = Stats()
    connector = aiohttp.TCPConnector(limit=args.concurrency, force_close=False)
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        # One request per connection first, so that the run measures a warm pool.
        await asyncio.gather(
            *(
                _one(session, args.url, body, headers, args.stream, Stats())
                for _ in range(args.concurrency)
            )
        )
        started = time.perf_counter()
        stop_at = started + (args.seconds if not args.requests else 86400)
        await asyncio.gather(
            *(
                _worker(args, session, body, headers, stats, stop_at)
                for _ in range(args.concurrency)
            )
        )
        elapsed = time.perf_counter() - started
    done = len(stats.latencies)
    result: dict[str, Any] = {
        "generator": "loadgen",
        "requests": done,
        "errors": stats.errors,
        "timeouts": stats.timeouts,
        "seconds": round(elapsed, 3),
        "rps": round(done / elapsed, 1) if elapsed else 0.0,
        "latency_ms": percentiles(stats.latencies),
    }
    if args.stream:
        result["ttft_ms"] = percentiles(stats.ttfts)
        result["gap_ms"] = percentiles(stats.gaps)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.loadgen")
    parser.add_argument("url")
    parser.add_argument("--body-file", required=True)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--requests", type=int, default=0)
    parser.add_argument("--header", action="append", default=[])
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per request")
    args = parser.parse_args()
    with open(args.body_file, "rb") as handle:
        body = handle.read()
    try:
        import uvloop
    except ImportError:
        result = asyncio.run(load(args, body))
    else:
        result = uvloop.run(load(args, body))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
