"""Tool search's policy side and the engine's offer (docs/design.md §17): which tools a
request's rounds offer, the search function it is answered with, and the settings a
tenant gets."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config import SEARCHED_MAX_TOOLS, GatewayConfig, ToolSearchConfig
from gateway.engine.offer import Offer
from gateway.policy.tenants import TenantDirectory
from gateway.policy.tool_search import Catalogs
from gateway.values import Message, ToolCall, ToolChoice
from tool_registry import SEARCH_TOOL, CallContext, HttpTool, ToolRegistry, ToolSpec


def tool(name: str, description: str) -> HttpTool:
    spec = {"name": name, "description": description, "http": {"url": "http://x"}}
    return HttpTool(ToolSpec.model_validate(spec), label=f"openapi:{name.split('_')[0]}")


TOOLS = [
    tool("crm_find_customer", "Find a customer by e-mail."),
    tool("crm_update_customer", "Update a customer's address."),
    tool("billing_list_invoices", "List the invoices of a customer."),
    tool("billing_refund_payment", "Refund a payment."),
    tool("weather_forecast", "The weather forecast of a city."),
    tool("mail_send", "Send an e-mail message."),
    tool("calendar_add_event", "Add an event to a calendar."),
    tool("tickets_open", "Open a support ticket."),
]
REGISTRY = ToolRegistry(TOOLS)
CATALOGS = Catalogs.build(REGISTRY)
ON = ToolSearchConfig(mode="on", preselect=2, max_loaded=3)


def catalog(settings: ToolSearchConfig = ON, tools: tuple[str, ...] = REGISTRY.names) -> Any:
    found = CATALOGS.of(tools, settings, frozenset())
    assert found is not None
    return found


def search(query: str, call_id: str = "s", **more: Any) -> ToolCall:
    return ToolCall(call_id, SEARCH_TOOL, json.dumps({"query": query, **more}))


def test_search_is_on_when_asked_or_when_many_tools_are_in_play() -> None:
    assert CATALOGS.of(REGISTRY.names, ToolSearchConfig(mode="off"), frozenset()) is None
    assert CATALOGS.of(REGISTRY.names, ToolSearchConfig(), frozenset()) is None  # 8 ≤ 32
    assert CATALOGS.of(REGISTRY.names, ToolSearchConfig(auto_above=7), frozenset()) is not None
    assert CATALOGS.of((), ON, frozenset()) is None  # nothing to search
    # A client tool of the search function's name wins: the gateway offers none.
    assert CATALOGS.of(REGISTRY.names, ON, frozenset({SEARCH_TOOL})) is None
    assert catalog() is catalog()  # one per tool set and settings
    assert catalog(ON, tuple(list(REGISTRY.names))) is catalog()  # a few: kept by value
    assert catalog().members == frozenset((*REGISTRY.names, SEARCH_TOOL))


def test_the_first_round_offers_the_best_matches_always_and_pinned_tools() -> None:
    found = catalog(ON.model_copy(update={"always": ("mail_*", "openapi:calendar")}))
    assert found.always == ("mail_send", "calendar_add_event")
    history = [Message("system", "Be brief."), Message("user", "Refund my last payment")]
    offer = Offer.start(found, history, ToolChoice("required", "tickets_open"))
    assert offer.preselected[0] == "billing_refund_payment"
    # At most max_loaded (3): pinned first, then the best matches; in registry order.
    assert offer.names == ("mail_send", "calendar_add_event", "tickets_open")
    unpinned = Offer.start(found, history, None)
    assert unpinned.names == ("billing_refund_payment", "mail_send", "calendar_add_event")
    assert len(Offer.start(found, [Message("user", "hello")], None).names) == 2


def test_found_and_called_tools_are_loaded_newest_kept() -> None:
    found = catalog()
    offer = Offer.start(found, [Message("user", "hi")], None)
    assert offer.names == ()
    offer = offer.after([search("weather forecast")])
    assert offer.names == ("weather_forecast",)
    offer = offer.after([ToolCall("c", "tickets_open", "{}"), search("invoices", limit=1)])
    assert offer.loaded == ("weather_forecast", "tickets_open", "billing_list_invoices")
    offer = offer.after([ToolCall("d", "mail_send", "{}")])
    assert offer.loaded == ("tickets_open", "billing_list_invoices", "mail_send")
    # Calls of what is not in play, or not a search's arguments, load nothing.
    same = offer.after([ToolCall("e", "nope", "{}"), ToolCall("f", SEARCH_TOOL, "{bad")])
    assert same is offer
    # A history's searches and calls (a turn put back after a hand-back) count.
    turn = Message("assistant", None, (search("refund payment"),))
    again = Offer.start(found, [Message("user", "hi"), turn], None)
    assert "billing_refund_payment" in again.names


def test_the_search_function_answers_among_the_tools_in_play() -> None:
    allowed = ("crm_find_customer", "weather_forecast", "mail_send")
    found = catalog(ON, allowed)
    function = found.tool
    assert "catalog of 3 tools" in (function.description or "")
    answer = json.loads(function.answer("customer e-mail"))
    names = [t["name"] for t in answer["tools"]]
    assert set(names) <= set(allowed)
    assert names[0] == "crm_find_customer"
    assert answer["tools"][0]["description"] == "Find a customer by e-mail."
    assert json.loads(function.answer("refund"))["tools"] == []  # not in play: not found
    assert function.search("weather", 99) == function.search("weather", 3)  # max_loaded
    prepared = function.prepare('{"query": "x", "limit": 2}', CallContext("t"))
    assert prepared.arguments == {"query": "x", "limit": 2}
    assert function.found('{"query": 5}') == ()
    assert function.effects == "read"
    every = catalog()
    saved = every.total_bytes - every.sizes["mail_send"] - every.search_bytes
    assert every.bytes_saved(("mail_send",)) == saved > 0


@settings(max_examples=150, deadline=None)
@given(query=st.text(max_size=2000), limit=st.integers(-5, 50))
def test_any_query_gives_a_bounded_answer_among_the_tools_in_play(query: str, limit: int) -> None:
    found = catalog(ON, REGISTRY.names[:5])
    names = [t["name"] for t in json.loads(found.tool.answer(query, limit))["tools"]]
    assert set(names) <= set(REGISTRY.names[:5])
    assert len(names) <= ON.max_loaded


def data(**extra: Any) -> dict[str, Any]:
    return {
        "upstreams": [{"name": "u", "base_url": "http://up.invalid/v1"}],
        "models": [{"name": "m", "upstream": "u"}],
        **extra,
    }


def test_a_tenant_s_settings_win_field_by_field() -> None:
    config = GatewayConfig.model_validate(
        data(
            tool_search={"mode": "on", "preselect": 4, "always": ["mail_*"]},
            tenants=[
                {"id": "a", "keys": ["ka"], "tools": ["*"], "tool_search": {"preselect": 12}},
                {"id": "b", "keys": ["kb"], "tools": ["*"]},
            ],
        )
    )
    a, b = (t.tool_search for t in TenantDirectory(config, REGISTRY.names).all())
    assert (a.mode, a.preselect, a.always) == ("on", 12, ("mail_*",))
    assert (b.mode, b.preselect) == ("on", 4)


@pytest.mark.parametrize(("mode", "bound"), [(None, SEARCHED_MAX_TOOLS), ("off", 256)])
def test_imported_catalogs_may_be_larger_where_search_may_be_on(
    mode: str | None, bound: int
) -> None:
    search = {"tool_search": {"mode": mode}} if mode else {}
    sources = {
        "openapi": [{"spec": "a.json"}, {"spec": "b.json", "max_tools": 9}],
        "mcp": [{"name": "s", "url": "http://mcp.invalid/mcp"}],
    }
    config = GatewayConfig.model_validate(data(**sources, **search))
    assert [o.max_tools for o in config.openapi] == [bound, 9]
    assert config.mcp[0].max_tools == bound
