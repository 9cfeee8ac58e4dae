"""Tool search's index at catalog scale (issue 36): build time and memory, and search
latency, for a synthetic catalog of ``--tools`` tools (default 10,000) whose names and
descriptions are drawn from a fixed vocabulary, so runs compare.

    python -m bench.search [--tools N] [--queries Q]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import tracemalloc

from tool_registry import HttpTool, ToolSpec
from tool_registry.search import ToolIndex

VERBS = [
    "get",
    "list",
    "create",
    "update",
    "delete",
    "find",
    "search",
    "send",
    "open",
    "close",
    "sync",
    "export",
    "import",
]
NOUNS = [
    "customer",
    "invoice",
    "ticket",
    "order",
    "payment",
    "refund",
    "shipment",
    "product",
    "user",
    "account",
    "report",
    "message",
    "email",
    "calendar",
    "event",
    "file",
    "folder",
    "repository",
    "issue",
    "comment",
    "weather",
    "forecast",
    "city",
    "contract",
    "lead",
    "campaign",
    "subscription",
    "plan",
    "quota",
]


def catalog(size: int, seed: int = 7) -> list[HttpTool]:
    rng = random.Random(seed)
    tools = []
    for i in range(size):
        verb, noun, other = rng.choice(VERBS), rng.choice(NOUNS), rng.choice(NOUNS)
        about = f"{verb.title()} a {noun} by its {other}; service {i % 150}, region {i % 13}."
        properties = {other: {"type": "string", "description": f"The {noun}'s {other}"}}
        spec = {
            "name": f"svc{i % 150}_{verb}_{noun}_{i}",
            "description": about,
            "parameters": {"type": "object", "properties": properties},
            "http": {"url": "http://tools.invalid/"},
        }
        tools.append(HttpTool(ToolSpec.model_validate(spec)))
    return tools


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=2_000)
    args = parser.parse_args()
    tools = catalog(args.tools)
    tracemalloc.start()
    started = time.perf_counter()
    index = ToolIndex(tools)
    built = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rng = random.Random(11)
    allowed = frozenset(t.name for t in tools[: len(tools) // 2])  # a tenant's half
    timings = []
    for _ in range(args.queries):
        query = f"please {rng.choice(VERBS)} the {rng.choice(NOUNS)} for {rng.choice(NOUNS)}"
        started = time.perf_counter()
        index.search(query, 8, allowed)
        timings.append(time.perf_counter() - started)
    timings.sort()
    p50 = statistics.median(timings) * 1000
    p99 = timings[int(len(timings) * 0.99) - 1] * 1000
    print(f"{args.tools} tools: index built in {built * 1000:.0f} ms, peak {peak / 2**20:.1f} MiB")
    print(f"search among half of them, top 8: p50 {p50:.3f} ms, p99 {p99:.3f} ms")


if __name__ == "__main__":
    main()
