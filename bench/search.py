"""Tool search at catalog scale (issue 36), for a synthetic catalog of ``--tools``
tools (default 10,000) and a synthetic OpenAPI document of ``--operations`` operations
(default 1,500) imported as the gateway imports one, names and descriptions drawn from
a fixed vocabulary so runs compare:

- the index's build time and memory, and memory per 1,000 tools with their registry;
- search latency among half the catalog (a tenant's allowlist), p50 and p99;
- the bytes of tool definitions a request sends upstream with search on — its first
  round (``preselect`` matches and the search function) and a round at ``max_loaded``
  — beside every tool in play, as the chat dialect declares them.

    python -m bench.search [--tools N] [--operations N] [--queries Q]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import tracemalloc
from collections.abc import Callable

from gateway.config import ToolSearchConfig
from gateway.engine.offer import Offer
from gateway.policy.tool_search import Catalogs
from gateway.upstream.chat_codec import encode_tools
from gateway.values import Message, ToolCall
from tool_registry import (
    SEARCH_TOOL,
    HttpTool,
    OpenApiSource,
    Tool,
    ToolIndex,
    ToolRegistry,
    ToolSpec,
    dumps,
    openapi_tools,
)

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


STRING = {"type": "string"}
COUNT = {"type": "integer", "minimum": 1, "maximum": 100}


def openapi_document(operations: int, seed: int = 5) -> dict[str, object]:
    """A document of ``operations`` operations over resources of the vocabulary."""
    rng = random.Random(seed)
    paths: dict[str, dict[str, object]] = {}
    methods = ("get", "post", "put", "delete", "patch")
    for i in range(operations):
        verb, noun, other = rng.choice(VERBS), rng.choice(NOUNS), rng.choice(NOUNS)
        path = f"/v1/{noun}s/{i // len(methods)}/{other}s/{{{other}_id}}"
        method = methods[i % len(methods)]
        paths.setdefault(path, {})[method] = {
            "operationId": f"{verb}{noun.title()}{other.title()}{i}",
            "summary": f"{verb.title()} the {other} of a {noun}",
            "description": f"{verb.title()}s the {other} of a {noun}, by its id. Area {i % 40}.",
            "parameters": [
                {
                    "name": f"{other}_id",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string"},
                },
                {
                    "name": "limit",
                    "in": "query",
                    "description": "The most items returned.",
                    "schema": {"type": "integer", "minimum": 1, "maximum": 100},
                },
            ],
            "responses": {"200": {"description": "OK"}},
        }
    return {
        "openapi": "3.0.3",
        "info": {"title": "bench", "version": "1"},
        "servers": [{"url": "http://api.invalid"}],
        "paths": paths,
    }


def weigh(make: Callable[[], list[Tool]]) -> tuple[float, int, ToolRegistry, ToolIndex]:
    """Make the tools, their registry and its index: seconds, peak bytes (a second
    time: tracing memory slows it), the two."""
    started = time.perf_counter()
    registry = ToolRegistry(make())
    index = ToolIndex(registry)
    built = time.perf_counter() - started
    del registry, index
    tracemalloc.start()
    registry = ToolRegistry(make())
    index = ToolIndex(registry)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return built, peak, registry, index


def sent_bytes(registry: ToolRegistry, index: ToolIndex, query: str) -> tuple[int, int, int]:
    """The definitions' bytes a request sends upstream: every tool, search's first
    round, and a round with ``max_loaded`` found."""
    every = len(dumps(encode_tools(registry.definitions(registry.names))))
    catalogs = Catalogs(registry, index)
    settings = ToolSearchConfig(mode="on")
    catalog = catalogs.of(registry.names, settings, frozenset())
    assert catalog is not None
    offer = Offer.start(catalog, [Message("user", query)], None)

    def declared(offer: Offer) -> int:
        definitions = (*registry.definitions(offer.names), *catalog.definitions)
        return len(dumps(encode_tools(definitions)))

    first = declared(offer)
    wide = ToolCall("c", SEARCH_TOOL, dumps({"query": query, "limit": 32}).decode())
    loaded = offer.after([wide, ToolCall("d", SEARCH_TOOL, dumps({"query": "list"}).decode())])
    return every, first, declared(loaded)


def report(label: str, make: Callable[[], list[Tool]], query: str) -> None:
    built, peak, registry, index = weigh(make)
    every, first, full = sent_bytes(registry, index, query)
    per = peak / len(registry) * 1000 / 2**20
    print(
        f"{label}: {len(registry)} tools; tools, registry and index made in "
        f"{built * 1000:.0f} ms, "
        f"peak {peak / 2**20:.1f} MiB ({per:.2f} MiB per 1,000 tools)"
    )
    print(
        f"  definitions per request: every tool {every / 1000:,.0f} kB; search on, first "
        f"round {first / 1000:,.1f} kB ({first / every:.2%}), a round at max_loaded "
        f"{full / 1000:,.1f} kB ({full / every:.2%})"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", type=int, default=10_000)
    parser.add_argument("--operations", type=int, default=1_500)
    parser.add_argument("--queries", type=int, default=2_000)
    args = parser.parse_args()
    document = openapi_document(args.operations)
    source = OpenApiSource(spec="bench.json", max_tools=args.operations)

    def imported() -> list[Tool]:
        return list(openapi_tools(document, source, "bench").tools)

    report(f"OpenAPI, {args.operations} operations", imported, "close the ticket")
    report("synthetic catalog", lambda: list(catalog(args.tools)), "find a customer's invoice")
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
