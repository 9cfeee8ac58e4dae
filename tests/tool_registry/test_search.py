"""Tool search's index (docs/design.md §17): BM25 over a catalog's tools, searched among
the tools a request may use. Its text and its queries are hostile: a query of any size
or shape is answered in bounded time, and no tool's text makes it match everything."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tool_registry import HttpTool, ToolSpec
from tool_registry.search import (
    QUERY_CHARS,
    QUERY_WORDS,
    TOOL_WORDS,
    ToolIndex,
    query_words,
    tool_words,
)


def tool(name: str, description: str = "", parameters: dict[str, Any] | None = None) -> HttpTool:
    spec: dict[str, Any] = {"name": name, "description": description, "http": {"url": "http://x"}}
    if parameters is not None:
        spec["parameters"] = parameters
    return HttpTool(ToolSpec.model_validate(spec))


CATALOG = [
    tool(
        "get_weather",
        "Current weather for a city.",
        {"type": "object", "properties": {"city": {"type": "string"}}},
    ),
    tool(
        "crm_findCustomer",
        "Look a customer up by e-mail.",
        {
            "type": "object",
            "properties": {
                "email": {"type": "string", "description": "The customer's e-mail address"}
            },
        },
    ),
    tool(
        "create_ticket",
        "Open a support ticket.",
        {"type": "object", "properties": {"title": {"type": "string"}}},
    ),
    tool("list_invoices", "Invoices of an account, newest first."),
    tool("send_email", "Send an e-mail message to someone."),
]
INDEX = ToolIndex(CATALOG)


def test_the_tool_that_fits_comes_first() -> None:
    assert INDEX.search("what's the weather in Oslo?", 3) == ["get_weather"]
    assert INDEX.search("find the customer with this email", 2)[0] == "crm_findCustomer"
    assert INDEX.search("open a ticket for me", 1) == ["create_ticket"]
    # Names split into words; parameters' names and descriptions count.
    assert tool_words(CATALOG[1])[:3] == ["crm", "find", "custom"]  # stemmed
    assert INDEX.search("address", 5) == ["crm_findCustomer"]


def test_only_tools_the_request_may_use_are_found() -> None:
    allowed = frozenset({"send_email", "list_invoices"})
    found = INDEX.search("email the customer", 5, allowed)
    assert found == ["send_email"]
    assert INDEX.search("weather", 5, frozenset()) == []
    assert INDEX.search("weather", 5, frozenset({"not_a_tool"})) == []


def test_nothing_is_found_for_no_matching_word() -> None:
    assert INDEX.search("", 5) == []
    assert INDEX.search("the of and", 5) == []  # stop words only
    assert INDEX.search("zebra", 5) == []
    assert INDEX.search("weather", 0) == []
    assert ToolIndex([]).search("weather", 5) == []


def test_one_tool_cannot_match_everything() -> None:
    every_word = " ".join(word for t in CATALOG for word in tool_words(t)) * 50
    spammy = [*CATALOG, tool("spam", every_word)]
    index = ToolIndex(spammy)
    assert len(tool_words(spammy[-1])) == TOOL_WORDS
    assert index.search("what's the weather in Oslo?", 1) == ["get_weather"]
    assert index.search("open a ticket for me", 1) == ["create_ticket"]


def test_a_huge_query_or_text_is_read_only_as_far_as_it_counts() -> None:
    catalog = [tool(f"tool_{i}", f"does thing number {i} with widget{i % 97}") for i in range(200)]
    index = ToolIndex(catalog)
    huge = " ".join(f"widget{i}" for i in range(2_000_000 // 8))  # about 2 MB
    assert query_words(huge) == query_words(huge[:QUERY_CHARS])  # the rest is never read
    assert len(query_words(huge)) == QUERY_WORDS
    assert len(index.search(huge, 8)) == 8
    long = tool("long", "x" * 5_000_000 + " needle")  # a 5 MB word, then another
    assert "needle" not in tool_words(long)  # past TEXT_CHARS: never read
    assert len(tool_words(long)) <= TOOL_WORDS


@settings(max_examples=200, deadline=None)
@given(
    query=st.text(max_size=300) | st.from_regex(r"[\\.*+?()\[\]{}|^$]{0,40}"),
    limit=st.integers(-2, 12),
    allowed=st.none() | st.frozensets(st.sampled_from([t.name for t in CATALOG] + ["x"])),
)
def test_any_query_is_answered_among_what_is_allowed(
    query: str, limit: int, allowed: frozenset[str] | None
) -> None:
    found = INDEX.search(query, limit, allowed)
    assert len(found) <= max(limit, 0)
    assert len(set(found)) == len(found)
    if allowed is not None:
        assert set(found) <= allowed
