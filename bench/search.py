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
from typing import Any

import numpy as np

from gateway.chat_json import encode_tools
from gateway.config import ToolSearchConfig
from gateway.engine.offer import Offer
from gateway.policy.tool_search import Catalogs
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


def weighed(label: str, make: Callable[[], list[Tool]], query: str) -> dict[str, Any]:
    """One catalog's figures: making it, its weight, what a request sends."""
    built, peak, registry, index = weigh(make)
    every, first, full = sent_bytes(registry, index, query)
    return {
        "catalog": label,
        "tools": len(registry),
        "made_ms": round(built * 1000),
        "peak_mib": round(peak / 2**20, 1),
        "mib_per_1000_tools": round(peak / len(registry) * 1000 / 2**20, 2),
        "every_tool_bytes": every,
        "first_round_bytes": first,
        "max_loaded_round_bytes": full,
        "first_round_share": round(first / every, 4),
        "max_loaded_share": round(full / every, 4),
    }


def latency(tools: list[HttpTool], queries: int) -> dict[str, Any]:
    """The index alone: build time and memory, then searches among half the tools."""
    tracemalloc.start()
    started = time.perf_counter()
    index = ToolIndex(tools)
    built = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rng = random.Random(11)
    allowed = frozenset(t.name for t in tools[: len(tools) // 2])  # a tenant's half
    timings = []
    for _ in range(queries):
        query = f"please {rng.choice(VERBS)} the {rng.choice(NOUNS)} for {rng.choice(NOUNS)}"
        started = time.perf_counter()
        index.search(query, 8, allowed)
        timings.append(time.perf_counter() - started)
    registry = ToolRegistry(tools)
    catalogs = Catalogs(registry, index)
    catalog = catalogs.of(tuple(sorted(allowed)), ToolSearchConfig(mode="on"), frozenset())
    assert catalog is not None
    tasks = [
        [
            Message(
                "user",
                f"Please {rng.choice(VERBS)} the {rng.choice(NOUNS)} for {rng.choice(NOUNS)}, "
                f"then {rng.choice(VERBS)} its {rng.choice(NOUNS)}; also {rng.choice(VERBS)} "
                f"the {rng.choice(NOUNS)}.",
            )
        ]
        for _ in range(queries)
    ]
    words_only = _timed(lambda history: catalog.preselected(history), tasks)
    # With vectors (their values do not change the work): the embedding call excluded.
    width = 384
    vectors = np.random.default_rng(3).standard_normal((len(tools), width)).astype(np.float32)
    index.attach(vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
    meanings = {
        text: vectors[hash(text) % len(tools)]
        for history in tasks
        for text in catalog.texts_to_embed(history)
    }
    hybrid = _timed(lambda history: catalog.preselected(history, meanings), tasks)
    index.attach(None)
    return {
        "tools": len(tools),
        "index_ms": round(built * 1000),
        "index_peak_mib": round(peak / 2**20, 1),
        **_quantiles("search", sorted(timings)),
        **_quantiles("preselect", words_only),
        **_quantiles("preselect_hybrid", hybrid),
        "task_parts": round(statistics.fmean(len(catalog.texts_to_embed(h)) for h in tasks), 1),
    }


def _timed(work: Callable[[Any], object], inputs: list[Any]) -> list[float]:
    timings = []
    for value in inputs:
        started = time.perf_counter()
        work(value)
        timings.append(time.perf_counter() - started)
    return sorted(timings)


def _quantiles(name: str, timings: list[float]) -> dict[str, float]:
    return {
        f"{name}_p50_ms": round(statistics.median(timings) * 1000, 3),
        f"{name}_p99_ms": round(timings[int(len(timings) * 0.99) - 1] * 1000, 3),
    }


def embedding_call(queries: int = 200) -> dict[str, Any]:
    """A request's one call to a real embeddings server (``bench.embedder``: uvicorn,
    all-MiniLM-L6-v2 on this CPU) over loopback, for a task's texts."""
    import tempfile
    from pathlib import Path

    import httpx

    from .procs import Processes, free_port

    rng = random.Random(13)
    with tempfile.TemporaryDirectory() as logs:
        children, port = Processes(Path(logs)), free_port()
        try:
            children.python("embedder", ["bench.embedder", "--port", str(port)], port, None)
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
                timings = []
                for _ in range(queries):
                    first, then = rng.choice(VERBS), rng.choice(VERBS)
                    text = f"Please {first} the {rng.choice(NOUNS)}, then {then} it"
                    body = {"model": "m", "input": [text, *text.split(", then ")]}
                    started = time.perf_counter()
                    client.post("/v1/embeddings", json=body).raise_for_status()
                    timings.append(time.perf_counter() - started)
        finally:
            children.stop()
    return _quantiles("embedding_call", sorted(timings))


def measure(tools: int = 10_000, operations: int = 1_500, queries: int = 2_000) -> dict[str, Any]:
    """Every figure, for ``make bench`` and the command line."""
    document = openapi_document(operations)
    source = OpenApiSource(spec="bench.json", max_tools=operations)

    def imported() -> list[Tool]:
        return list(openapi_tools(document, source, "bench").tools)

    return {
        "catalogs": [
            weighed(f"OpenAPI, {operations} operations", imported, "close the ticket"),
            weighed(f"synthetic, {tools} tools", lambda: list(catalog(tools)), "find an invoice"),
        ],
        "index": latency(catalog(tools), queries),
        "embedding": embedding_call(),
    }


def lines(found: dict[str, Any]) -> list[str]:
    """The figures as text."""
    out = []
    for c in found["catalogs"]:
        out.append(
            f"{c['catalog']}: tools, registry and index made in {c['made_ms']} ms, peak "
            f"{c['peak_mib']} MiB ({c['mib_per_1000_tools']} MiB per 1,000 tools); "
            f"definitions per request: every tool {c['every_tool_bytes'] / 1000:,.0f} kB, "
            f"search on: first round {c['first_round_bytes'] / 1000:,.1f} kB "
            f"({c['first_round_share']:.2%}), a round at max_loaded "
            f"{c['max_loaded_round_bytes'] / 1000:,.1f} kB ({c['max_loaded_share']:.2%})"
        )
    i, e = found["index"], found["embedding"]
    out.append(
        f"index of {i['tools']} tools: built in {i['index_ms']} ms, peak "
        f"{i['index_peak_mib']} MiB; search among half of them, top 8: p50 "
        f"{i['search_p50_ms']} ms, p99 {i['search_p99_ms']} ms; a first round for a task "
        f"of {i['task_parts']} texts (itself and its parts): by words p50 "
        f"{i['preselect_p50_ms']} ms, p99 {i['preselect_p99_ms']} ms; hybrid (embedding "
        f"call excluded) p50 {i['preselect_hybrid_p50_ms']} ms, p99 "
        f"{i['preselect_hybrid_p99_ms']} ms; the embedding call (all-MiniLM-L6-v2 here, "
        f"loopback) p50 {e['embedding_call_p50_ms']} ms, p99 {e['embedding_call_p99_ms']} ms"
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", type=int, default=10_000)
    parser.add_argument("--operations", type=int, default=1_500)
    parser.add_argument("--queries", type=int, default=2_000)
    args = parser.parse_args()
    print("\n".join(lines(measure(args.tools, args.operations, args.queries))))


if __name__ == "__main__":
    main()
