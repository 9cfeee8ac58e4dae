"""Tool search for whole tasks (docs/tools.md, "Tool search"): a request's parts each
get slots in the first round, a chosen tool brings the tools that produce its
arguments, a model's search answers by part, and an embeddings model the operator
serves weighs meaning beside words, with search by words alone when it is slow, down
or not yet done. Driven by the stock SDK against a scripted model, a recording tool
server and a deterministic embeddings server (tests/support/embeddings.py)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import yaml

from gateway.cli.main import main
from tests.support.embeddings import Embeddings
from tests.support.scripted import MODEL, Harness, Model, asks, call, says
from tests.support.servers import until
from tool_registry import HttpTool, ToolIndex, ToolSpec

from .test_responses_e2e import sdk
from .test_tool_search_e2e import CATALOG, SEARCH, Stack, chat_round, offered, tools_for

TASK = (
    "Get the weather forecast for Paris. Then find flights from Berlin to Paris on "
    "Friday, then book a hotel room there for two nights; also convert 500 euros to yen."
)
PARTS_WANTED = {"weather_forecast", "flight_search", "hotel_booking", "currency_convert"}


def test_each_part_of_a_request_gets_its_slots_and_the_trace_says_which(
    harness: Harness,
) -> None:
    search = {"preselect": 2, "per_part": 2}
    stack = Stack(harness, Model(says("ok")), tool_search=search)
    _, request_id, count = chat_round(stack, TASK, False)
    [body] = stack.model.requests
    names = set(offered(body)) - {SEARCH}
    assert names >= PARTS_WANTED  # one ranking of the whole gave two slots to the weather
    assert len(names) <= 2 + 2 * 3  # preselect and per_part for each further part
    assert count == str(len(offered(body)))
    [first] = stack.trace(request_id)["rounds"]
    groups = {g["part"]: g["tools"] for g in first["tools_preselected"]}
    assert "flight_search" in groups["find flights from Berlin to Paris on Friday"]
    assert "currency_convert" in groups["convert 500 euros to yen"]
    assert sorted(n for tools in groups.values() for n in tools) == sorted(names)


def test_without_parts_the_first_round_is_preselect_long(harness: Harness) -> None:
    stack = Stack(harness, Model(says("ok")), tool_search={"preselect": 2, "per_part": 2})
    chat_round(stack, "Track my parcel shipment and tell me where it is", False)
    [body] = stack.model.requests
    assert offered(body)[0] == "shipment_track"
    assert len(offered(body)) <= 2 + 2 + 1  # two parts at most ("and"): no more


HOTELS = [
    (
        "hotel_search",
        "Search hotels available at a destination for given dates.",
        {
            "dest_id": {"type": "string", "description": "The destination's id."},
            "nights": {"type": "integer"},
        },
        None,
    ),
    (
        "hotel_destination_lookup",
        "Look up a city or region among the booking site's destinations.",
        {"name": {"type": "string", "description": "The place's name."}},
        {"type": "object", "properties": {"dest_id": {"type": "string"}}},
    ),
    (
        "room_details",
        "Get the rooms of a hotel.",
        {"hotel_id": {"type": "string", "description": "The hotel_id of a hotel_search result."}},
        None,
    ),
]


def hotel_tools(url: str) -> list[dict[str, Any]]:
    tools = tools_for(url)
    for name, about, properties, returns in HOTELS:
        tool: dict[str, Any] = {
            "name": name,
            "description": about,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": [next(iter(properties))],
            },
            "http": {"url": f"{url}/{name}"},
        }
        if returns is not None:
            tool["returns"] = returns
        tools.append(tool)
    return tools


def test_a_chosen_tool_brings_the_tool_that_produces_its_argument(harness: Harness) -> None:
    model = Model(says("ok"))
    search = {"preselect": 2, "per_part": 0}
    stack = Stack(harness, model, hotel_tools, tool_search=search)
    _, request_id, _ = chat_round(stack, "Search hotels for 2 nights", False)
    names = offered(model.requests[-1])
    # The first slot went to the hotel search, the second to its destination id's
    # producer (it answers a ``dest_id``), before the next best match for the words.
    assert names == ["hotel_search", "hotel_destination_lookup", SEARCH]
    [first] = stack.trace(request_id)["rounds"]
    assert first["tools_preselected"] == [
        {"part": "Search hotels for 2 nights", "tools": names[:2]}
    ]


def test_a_search_says_which_tool_a_producer_gives_arguments_to(harness: Harness) -> None:
    def script(body: dict[str, Any]) -> dict[str, Any]:
        if body["messages"][-1]["role"] == "tool":
            return says("done")
        return asks(call(SEARCH, {"query": "hotel rooms", "limit": 3}, "c_s"))

    model = Model(script)
    stack = Stack(harness, model, hotel_tools, tool_search={"preselect": 1})
    chat_round(stack, "hello", False)
    [result] = [m["content"] for m in model.requests[1]["messages"] if m["role"] == "tool"]
    tools = json.loads(result)["tools"]
    assert tools[0]["name"] == "room_details"
    # room_details needs a hotel_id "of a hotel_search result": hotel_search produces it.
    assert {"name": "hotel_search", "gives_arguments_to": "room_details"}.items() <= next(
        t for t in tools if t["name"] == "hotel_search"
    ).items() or tools[1]["name"] == "hotel_search"


def test_a_search_answers_by_part_and_keeps_what_was_preselected(harness: Harness) -> None:
    def script(body: dict[str, Any]) -> dict[str, Any]:
        if body["messages"][-1]["role"] == "tool":
            return says("done")
        return asks(call(SEARCH, {"query": "weather forecast; then flight search"}, "c_s"))

    model = Model(script)
    stack = Stack(harness, model, tool_search={"preselect": 3})
    chat_round(stack, "Track my parcel shipment", False)
    first, second = model.requests
    [result] = [m["content"] for m in second["messages"] if m["role"] == "tool"]
    answer = json.loads(result)
    groups = {g["part"]: [t["name"] for t in g["tools"]] for g in answer["parts"]}
    assert groups["weather forecast"][0] == "weather_forecast"
    assert groups["flight search"][0] == "flight_search"
    # The default limit: eight tools, not the round's 32.
    assert sum(len(tools) for tools in groups.values()) <= 8
    # What was preselected is offered still, beside what was found.
    kept = set(offered(first)) - {SEARCH}
    assert kept <= set(offered(second))
    assert {"weather_forecast", "flight_search"} <= set(offered(second))


def test_a_search_limit_of_one_is_kept_and_the_maximum_is_max_loaded(harness: Harness) -> None:
    def script(body: dict[str, Any]) -> dict[str, Any]:
        if body["messages"][-1]["role"] == "tool":
            return says("done")
        return asks(call(SEARCH, {"query": "calendar"}, "c_s"))

    model = Model(script)
    stack = Stack(harness, model, tool_search={"search_limit": 1, "max_loaded": 5})
    chat_round(stack, "hello", False)
    definition = model.requests[0]["tools"][-1]["function"]
    assert definition["parameters"]["properties"]["limit"]["maximum"] == 5
    [result] = [m["content"] for m in model.requests[1]["messages"] if m["role"] == "tool"]
    assert len(json.loads(result)["tools"]) == 1


# Embeddings: a tool whose words the request does not share.
EVENTS = ("events_in_city", "List what is on in a city: shows, exhibitions, sports.")


def embedded_stack(
    harness: Harness, embeddings: Embeddings, **search: Any
) -> tuple[Stack, httpx.Client]:
    """A stack searching with ``embeddings`` (``search`` may hold ``with_embeddings``: its
    embeddings settings)."""
    url = harness.serve(embeddings).url
    harness.on_close(embeddings.release)
    model = {"model": "fake-embed", "upstream": "emb", "timeout_ms": 400}
    settings = {"embeddings": search.pop("with_embeddings", model)}
    more = [{"name": "emb", "base_url": f"{url}/v1", "max_retries": 0}]
    stack = Stack(
        harness,
        Model(says("ok")),
        events_tools,
        tool_search={**settings, **search},
        more_upstreams=more,
    )
    return stack, harness.client(stack.gateway)


def events_tools(url: str) -> list[dict[str, Any]]:
    tools = tools_for(url)
    name, about = EVENTS
    tools.append(
        {
            "name": name,
            "description": about,
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            "http": {"url": f"{url}/{name}"},
        }
    )
    return tools


def metric(client: httpx.Client, name: str, labels: str = "") -> float:
    text = client.get("/metrics").text
    pattern = re.escape(name) + (re.escape("{" + labels + "}") if labels else "") + r" (\S+)"
    found = re.search(r"^" + pattern + "$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def wait_for(condition: Any, what: str, seconds: float = 60.0) -> None:
    assert until(condition, bool, seconds) is not None, f"waited {seconds:g} s for {what}"


def embedded(client: httpx.Client) -> bool:
    return metric(client, "toolgate_tool_search_embedded_tools") == len(CATALOG) + 1


FESTIVAL = "Any music festival in Lisbon this weekend?"


def first_round(stack: Stack, text: str) -> list[str]:
    stack.client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": text}])
    return offered(stack.model.requests[-1])


def test_meaning_finds_a_tool_that_shares_no_word_with_the_request(harness: Harness) -> None:
    embeddings = Embeddings()
    stack, metrics = embedded_stack(harness, embeddings, preselect=3)
    wait_for(lambda: embedded(metrics), "the catalog's vectors")
    catalog_texts = len(embeddings.texts())
    assert catalog_texts == len(CATALOG) + 1  # each tool once
    names = first_round(stack, FESTIVAL)
    # By meaning ("festival" is an event): the words alone find nothing at all.
    assert "events_in_city" in names
    tools = [HttpTool(ToolSpec.model_validate(t)) for t in events_tools("http://127.0.0.1:9")]
    assert ToolIndex(tools).search(FESTIVAL, 3) == []
    # One call for the request's text, after the catalog's.
    assert embeddings.requests[-1] == [FESTIVAL]
    assert (
        metric(metrics, "toolgate_tool_search_embeddings_total", 'kind="query",outcome="ok"') == 1
    )


@pytest.mark.parametrize("mode", ["hang", "down", "garbage"])
def test_a_slow_dead_or_lying_embeddings_model_leaves_search_to_words(
    harness: Harness, mode: str
) -> None:
    embeddings = Embeddings(is_query=lambda texts: len(texts) == 1)
    stack, metrics = embedded_stack(harness, embeddings, preselect=3)
    wait_for(lambda: embedded(metrics), "the catalog's vectors")
    embeddings.query_mode = mode
    started = time.monotonic()
    names = first_round(stack, "Convert 500 euros to yen, please")
    assert names[0] == "currency_convert"  # by words alone
    if mode == "hang":
        assert time.monotonic() - started < 30  # the 400 ms bound, not the model's hour
    outcome = "timeout" if mode == "hang" else "error"
    labels = f'kind="query",outcome="{outcome}"'
    assert metric(metrics, "toolgate_tool_search_embeddings_total", labels) == 1


def test_a_catalog_not_embedded_yet_is_searched_by_words(harness: Harness) -> None:
    embeddings = Embeddings()
    embeddings.mode = "down"
    stack, metrics = embedded_stack(harness, embeddings, preselect=3)
    wait_for(
        lambda: (
            metric(
                metrics, "toolgate_tool_search_embeddings_total", 'kind="catalog",outcome="error"'
            )
            >= 1
        ),
        "the catalog's failed batch",
    )
    names = first_round(stack, "Convert 500 euros to yen")
    assert names[0] == "currency_convert"
    assert not embedded(metrics)
    assert all(len(r) > 1 for r in embeddings.requests)  # no query call without vectors


def test_replicas_share_the_catalog_vectors_through_the_store(
    harness: Harness, redis_url: str, redis_prefix: str
) -> None:
    harness.store = {"url": redis_url, "prefix": redis_prefix}
    embeddings = Embeddings()
    stack, metrics = embedded_stack(harness, embeddings, preselect=3)
    wait_for(lambda: embedded(metrics), "the first replica's vectors")
    computed = len(embeddings.texts())
    kept = redis.Redis.from_url(redis_url)
    harness.on_close(kept.close)
    wait_for(
        lambda: len(list(kept.scan_iter(match=f"{redis_prefix}vec:*", count=1000))) == computed,
        "every vector in the store",
    )
    # A second replica on the same store: every vector is read, none computed again.
    second = harness.gateway(stack.data)
    second_metrics = harness.client(second)
    wait_for(lambda: embedded(second_metrics), "the second replica's vectors")
    assert len(embeddings.texts()) == computed
    stack.gateway, stack.client = second, sdk(harness, second)
    assert "events_in_city" in first_round(stack, FESTIVAL)


def many_tools(url: str) -> list[dict[str, Any]]:
    """Past ``OFFLOADED_TOOLS``: the first round and the searches run in a worker thread."""
    tools = tools_for(url)
    tools += [
        {
            "name": f"pad_{i}",
            "description": f"Report number {i} of the archive.",
            "parameters": {"type": "object", "properties": {}},
            "http": {"url": f"{url}/pad"},
        }
        for i in range(1100)
    ]
    return tools


@pytest.mark.parametrize("stream", [False, True])
def test_a_catalog_past_a_thousand_tools_is_searched_off_the_event_loop(
    harness: Harness, stream: bool
) -> None:
    def script(body: dict[str, Any]) -> dict[str, Any]:
        last = body["messages"][-1]
        if last["role"] == "tool" and last["tool_call_id"] == "c_use":
            return says(f"result: {last['content']}")
        if "currency_convert" in offered(body) and last["role"] == "tool":
            return asks(call("currency_convert", {"q": "x"}, "c_use"))
        return asks(call(SEARCH, {"query": "weather forecast; convert money"}, "c_s"))

    stack = Stack(harness, Model(script), many_tools)
    text, request_id, _ = chat_round(stack, "Convert 10 euros to yen, then the weather", stream)
    assert text == 'result: {"tool":"currency_convert"}'
    first = stack.model.requests[0]
    assert {"currency_convert", "weather_forecast"} <= set(offered(first))
    [search] = stack.trace(request_id)["rounds"][0]["searches"]
    assert [p["part"] for p in search["parts"]] == ["weather forecast", "convert money"]


@pytest.mark.parametrize(("mode", "said"), [("ok", "ok  "), ("slow", "FAIL"), ("hang", "FAIL")])
def test_check_probe_times_the_embeddings_model(
    harness: Harness,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    mode: str,
    said: str,
) -> None:
    """Issue 62 §8: ``toolgate check --probe`` asks the embeddings model one request's
    text and fails when it answers slower than a request waits (every request would be
    searched by words alone)."""
    embeddings = Embeddings()
    embeddings.mode, embeddings.delay_s = mode, 0.4
    url = harness.serve(embeddings).url
    harness.on_close(embeddings.release)
    data = {
        "upstreams": [{"name": "emb", "base_url": f"{url}/v1", "max_retries": 0}],
        "models": [{"name": MODEL, "upstream": "emb"}],
        # A fast model has a bound no loaded machine reaches; a slow one (0.4 s), one it
        # always passes; a hung one is waited for ten times the bound (1 s).
        "tool_search": {
            "embeddings": {"model": "fake-embed", "timeout_ms": 20_000 if mode == "ok" else 100}
        },
    }
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump(data))
    main(["check", "--config", str(config), "--probe"])
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "embeddings" in line and "fake-embed" in line)
    assert line.strip().startswith(said.strip()), out
    if mode == "slow":
        assert "answered in" in line
        assert "searched by words alone" in out
    if mode == "hang":
        assert "no answer within 1 s" in line
    assert embeddings.texts()
    assert all("Paris" in t for t in embeddings.texts())


@pytest.mark.parametrize("catalog_timeout_s", [0.2, 30.0])
def test_a_catalog_batch_waits_as_long_as_the_setting_says(
    harness: Harness, catalog_timeout_s: float
) -> None:
    """Issue 62 §8: a slow (CPU) embedder's catalog batches wait ``catalog_timeout_s``,
    not a fixed time; the tools still to embed are a metric while it works."""
    embeddings = Embeddings()
    embeddings.mode, embeddings.delay_s = "slow", 0.6
    settings = {
        "model": "fake-embed",
        "upstream": "emb",
        "timeout_ms": 400,
        "catalog_timeout_s": catalog_timeout_s,
    }
    _, client = embedded_stack(harness, embeddings, with_embeddings=settings)
    timeouts = 'kind="catalog",outcome="timeout"'
    if catalog_timeout_s < embeddings.delay_s:
        wait_for(
            lambda: metric(client, "toolgate_tool_search_embeddings_total", timeouts) >= 1,
            "a timeout",
        )
        assert metric(client, "toolgate_tool_search_embedded_tools") == 0
        assert metric(client, "toolgate_tool_search_catalog_tools_left") == len(CATALOG) + 1
    else:
        wait_for(lambda: embedded(client), "the catalog embedded")
        assert metric(client, "toolgate_tool_search_embeddings_total", timeouts) == 0
        assert metric(client, "toolgate_tool_search_catalog_tools_left") == 0
