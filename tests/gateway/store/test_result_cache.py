"""The tool-result cache is keyed by the tool's definition too: a reload that points a
tool's name at another URL never serves the old definition's results."""

from __future__ import annotations

import pytest

from gateway.store import Keys, open_store
from gateway.store.result_cache import ResultCache
from tool_registry import CallContext, HttpTool, ToolResult, ToolSpec

pytestmark = pytest.mark.anyio


def lookup(url: str, token: str = "t-1") -> HttpTool:
    return HttpTool(
        ToolSpec.model_validate(
            {
                "name": "lookup",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
                "http": {"url": url, "headers": {"authorization": f"Bearer {token}"}},
                "cache_ttl_s": 60,
            }
        )
    )


async def test_a_changed_definition_misses_a_rotated_header_does_not() -> None:
    store = open_store("memory://", 0.1)
    cache = ResultCache(store, Keys("test:"))
    context = CallContext("acme")
    old = lookup("http://old.example/q").prepare('{"q": "x"}', context)
    await cache.put("acme", old, ToolResult("old answer", "ok", 200), 60)
    same = lookup("http://old.example/q", token="t-2").prepare('{"q": "x"}', context)
    hit = await cache.get("acme", same)
    assert hit is not None
    assert hit.content == "old answer"
    moved = lookup("http://new.example/q").prepare('{"q": "x"}', context)
    assert await cache.get("acme", moved) is None
    assert await cache.get("beta", same) is None  # and per tenant, as before
    await store.aclose()
