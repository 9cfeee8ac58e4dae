"""Tool search for whole tasks, in the registry (tool_registry/tasks.py, producers.py):
a request's parts, the slots dealt among them, and the producers of a chosen tool's
arguments, from every source that says what its tools answer."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import mcp.types as mcp_types
from hypothesis import given, settings
from hypothesis import strategies as st

from tool_registry import (
    EgressPolicy,
    HttpTool,
    McpServer,
    McpServerConfig,
    OpenApiSource,
    ToolIndex,
    ToolSpec,
    openapi_tools,
)
from tool_registry.producers import CROWD, PRODUCERS, producers
from tool_registry.search import words
from tool_registry.sources.mcp import McpTool
from tool_registry.tasks import PARTS, PRODUCED, Pick, deal, parts


def split(text: str) -> list[str]:
    return list(words(text))


def tool(
    name: str,
    about: str = "",
    needs: dict[str, str] | None = None,
    returns: list[str] | None = None,
    label: str | None = None,
) -> HttpTool:
    properties = {p: {"type": "string", "description": d} for p, d in (needs or {}).items()}
    spec = ToolSpec(
        name=name,
        description=about,
        parameters={"type": "object", "properties": properties, "required": list(properties)},
        returns={"type": "object", "properties": {f: {} for f in returns}} if returns else None,
        http={"url": "http://127.0.0.1:9/x"},
    )
    return HttpTool(spec, label=label)


def everything(_: str) -> bool:
    return True


def test_a_request_is_cut_at_sentences_and_clauses() -> None:
    text = (
        "Get the weather in Paris. Then find flights to Rome, then book a hotel; "
        "also convert 500 euros to yen"
    )
    assert parts(text, everything) == (
        "Get the weather in Paris",
        "find flights to Rome",
        "book a hotel",
        "convert 500 euros to yen",
    )


def test_parts_without_a_searchable_word_are_left_out_and_one_part_is_the_text() -> None:
    vocabulary = {"weather", "flight"}

    def known(part: str) -> bool:
        return any(w in vocabulary for w in part.lower().split())

    assert parts("Hello there. What is the weather?", known) == (
        "Hello there. What is the weather?",
    )
    assert parts("the weather, and a flight", known) == ("the weather", "a flight")
    assert parts("Nothing here. Nor there", known) == ()
    assert parts("Nothing here", known) == ("Nothing here",)  # one clause: the text


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=4000))
def test_any_text_gives_at_most_parts_each_from_the_text(text: str) -> None:
    found = parts(text, lambda part: bool(part.strip()))
    assert len(found) <= PARTS
    if len(found) > 1:
        assert all(part and part == part.strip(" ,") for part in found)
    else:
        assert found in ((), (text.strip(),))


def test_a_long_hostile_request_is_cut_quickly() -> None:
    text = ("and then, " * 50_000) + "weather"
    started = time.process_time()  # this process's CPU: another's load does not count
    found = parts(text, lambda part: "weather" in part)
    assert found == (text.strip(),) or len(found) <= PARTS
    assert time.process_time() - started < 5  # linear: a stall would take minutes


def test_each_part_gets_its_best_before_any_part_its_second() -> None:
    ranked = [["w1", "w2", "w3", "w4"], ["f1", "f2"], ["h1"]]
    picks = deal(ranked, 5, {}, everything, lambda a, b: False)
    assert [p.name for p in picks] == ["w1", "f1", "h1", "w2", "f2"]
    assert [p.part for p in picks] == [0, 1, 2, 0, 1]


def test_the_lead_takes_the_first_rankings_best_then_parts_are_dealt() -> None:
    ranked = [["a", "b", "c"], ["b", "x"], ["y"]]
    picks = deal(ranked, 4, {}, everything, lambda a, b: False, lead=2)
    assert [p.name for p in picks] == ["a", "b", "x", "y"]
    # "b" came with the lead, and is said to answer the part that ranks it best.
    assert [p.part for p in picks] == [0, 1, 1, 2]


def test_a_tool_alike_one_chosen_for_its_part_waits_until_the_end() -> None:
    ranked = [["circle_area", "circle_area_v2", "circle_perimeter"], ["weather"]]
    alike = {frozenset({"circle_area", "circle_area_v2"})}
    picks = deal(ranked, 4, {}, everything, lambda a, b: frozenset({a, b}) in alike)
    assert [p.name for p in picks] == [
        "circle_area",
        "weather",
        "circle_perimeter",
        "circle_area_v2",
    ]


def test_producers_come_right_after_their_consumer_within_the_limit() -> None:
    producers_of = {"hotel_search": ("destination_lookup", "forbidden")}
    picks = deal(
        [["hotel_search", "other"]],
        2,
        producers_of,
        lambda name: name != "forbidden",
        lambda a, b: False,
    )
    assert picks == (
        Pick("hotel_search", 0),
        Pick("destination_lookup", PRODUCED, "hotel_search"),
    )


def test_a_field_of_the_answer_named_like_an_argument_makes_a_producer() -> None:
    found = producers(
        [
            tool("book_flight", needs={"access_token": "The token.", "card_id": "The card."}),
            tool("authenticate", returns=["access_token", "expires_in"]),
            tool("register_card", returns=["card_id"]),
            tool("list_flights", returns=["flight_number"]),
        ],
        split,
    )
    assert set(found["book_flight"]) == {"authenticate", "register_card"}


def test_an_argument_within_a_field_or_a_field_named_in_its_description() -> None:
    found = producers(
        [
            tool("pay", needs={"travel_cost": "What to pay."}),
            tool("get_flight_cost", returns=["travel_cost_list"]),
            tool("send_message", needs={"receiver_id": "User ID of the user to send it to."}),
            tool("get_user_id", returns=["user_id"]),
        ],
        split,
    )
    assert found["pay"] == ("get_flight_cost",)
    assert found["send_message"] == ("get_user_id",)


def test_a_tool_named_in_an_arguments_description_is_its_producer() -> None:
    found = producers(
        [
            tool("Search_Hotels", needs={"dest_id": "Retrieve it from Search Hotel Destination."}),
            tool("Search_Hotel_Destination", needs={"query": "A place."}),
        ],
        split,
    )
    assert found["Search_Hotels"] == ("Search_Hotel_Destination",)


def test_an_identifier_is_produced_by_the_tool_that_looks_its_noun_up() -> None:
    found = producers(
        [
            tool("hotel_search", needs={"dest_id": "Where."}),
            tool("search_destinations", needs={"name": "A place."}),
            tool("delete_destination", needs={"dest_id": "Which."}),  # needs it itself
        ],
        split,
    )
    assert found["hotel_search"] == ("search_destinations",)
    assert "delete_destination" not in found.get("hotel_search", ())


def test_producers_are_of_the_same_source_and_never_the_tool_itself() -> None:
    found = producers(
        [
            tool("cancel", needs={"booking_id": "Which."}, returns=["booking_id"], label="a"),
            tool("book", returns=["booking_id"], label="b"),
        ],
        split,
    )
    assert found == {}


def test_a_tool_brings_at_most_producers_of_them_and_a_crowd_says_nothing() -> None:
    makers = [tool(f"make_{i}", returns=["order_id"]) for i in range(CROWD)]
    found = producers([tool("ship", needs={"order_id": "The order."}), *makers], split)
    assert len(found["ship"]) == PRODUCERS
    crowd = [*makers, tool("make_more", returns=["order_id"])]
    assert producers([tool("ship", needs={"order_id": "The order."}), *crowd], split) == {}


def test_many_tools_with_many_fields_are_read_in_time() -> None:
    tools = [
        tool(
            f"tool_{i}",
            needs={f"field_{j}_id": f"See tool {i + 1} field {j}." for j in range(20)},
            returns=[f"field_{j}_id" for j in range(20)],
        )
        for i in range(500)
    ]
    started = time.process_time()
    found = producers(tools, split)
    assert time.process_time() - started < 20  # linear: pairs of tools would take minutes
    assert all(len(p) <= PRODUCERS for p in found.values())


def test_an_mcp_output_schema_says_what_the_tool_answers() -> None:
    server = McpServer(McpServerConfig(name="geo", url="http://127.0.0.1:9/mcp"), EgressPolicy())
    geocode = mcp_types.Tool(
        name="geocode",
        input_schema={"type": "object", "properties": {"address": {"type": "string"}}},
        output_schema={
            "type": "object",
            "properties": {"latitude": {"type": "number"}, "longitude": {"type": "number"}},
        },
    )
    weather = mcp_types.Tool(
        name="weather",
        input_schema={
            "type": "object",
            "properties": {"latitude": {"type": "number"}, "longitude": {"type": "number"}},
            "required": ["latitude", "longitude"],
        },
    )
    tools = [McpTool(server, geocode, "geocode"), McpTool(server, weather, "weather")]
    assert tools[0].returns is not None
    assert producers(tools, split) == {"weather": ("geocode",)}


def openapi(document: dict[str, Any]) -> list[HttpTool]:
    source = OpenApiSource(spec="shop.yaml", base_url="http://127.0.0.1:9")
    return openapi_tools(document, source, "shop.yaml").tools


def test_an_openapi_response_body_and_links_make_producers() -> None:
    document = {
        "openapi": "3.1.0",
        "paths": {
            "/orders": {
                "post": {
                    "operationId": "createOrder",
                    "responses": {
                        "201": {
                            "description": "Made.",
                            "content": {
                                "application/json": {
                                    "schema": {"$ref": "#/components/schemas/Order"}
                                }
                            },
                            "links": {"Pay": {"operationId": "payInvoice"}},
                        }
                    },
                }
            },
            "/orders/{orderId}/ship": {
                "post": {
                    "operationId": "shipOrder",
                    "parameters": [
                        {"name": "orderId", "in": "path", "required": True, "schema": {}}
                    ],
                    "responses": {"204": {"description": "Shipped."}},
                }
            },
            "/invoices/{number}": {
                "post": {
                    "operationId": "payInvoice",
                    "parameters": [{"name": "number", "in": "path", "required": True}],
                    "responses": {"200": {"description": "Paid."}},
                }
            },
        },
        "components": {
            "schemas": {"Order": {"type": "object", "properties": {"orderId": {"type": "string"}}}}
        },
    }
    tools = openapi(document)
    made = next(t for t in tools if t.name == "createOrder")
    assert made.returns == {"properties": {"orderId": {}}}
    assert made.feeds == ("payInvoice",)
    found = producers(tools, split)
    assert found["shipOrder"] == ("createOrder",)  # its answer's orderId
    assert found["payInvoice"] == ("createOrder",)  # its link


def test_a_response_that_cannot_be_read_leaves_the_operation_in() -> None:
    document = {
        "openapi": "3.1.0",
        "paths": {
            "/x": {
                "get": {
                    "operationId": "getX",
                    "responses": {
                        "200": {
                            "content": {"application/json": {"schema": {"$ref": "#/nowhere"}}},
                            "links": {"L": {"$ref": "#/nowhere"}, "M": 7},
                        }
                    },
                }
            }
        },
    }
    [found] = openapi(document)
    assert found.returns is None
    assert found.feeds == ()


def test_choose_says_which_part_each_tool_answers_and_brings_producers() -> None:
    index = ToolIndex(
        [
            tool("weather_forecast", "Get the weather forecast for a place."),
            tool("flight_search", "Find flights between airports.", needs={"from_code": "IATA"}),
            tool("airport_lookup", "Look up an airport.", returns=["from_code"]),
            tool("recipe_find", "Find recipes."),
        ]
    )
    chosen = index.choose("The weather in Rome, then flights there", 4)
    assert chosen.parts == (
        "The weather in Rome, then flights there",
        "The weather in Rome",
        "flights there",
    )
    by_name = {pick.name: pick for pick in chosen.picks}
    assert chosen.part_of(by_name["weather_forecast"]) == "The weather in Rome"
    assert chosen.part_of(by_name["flight_search"]) == "flights there"
    assert by_name["airport_lookup"].produces_for == "flight_search"
    assert chosen.part_of(by_name["airport_lookup"]) == "flights there"
    assert "recipe_find" not in by_name


def kin_catalog(files: int) -> ToolIndex:
    about = [
        "Move a file.",
        "Copy a file.",
        "Change the working directory.",
        "Show disk usage.",
        "Print a text.",
        "Count words.",
        "Sort lines.",
        "Compare two texts.",
    ]
    fs = [tool(f"fs_{i}", about[i % len(about)], label="mcp:fs") for i in range(files)]
    others = [tool(f"shop_{i}", f"Sell product number {i} to a customer.") for i in range(30)]
    return ToolIndex([*fs, *others])


def test_a_task_of_one_small_source_brings_that_sources_other_tools() -> None:
    index = kin_catalog(8)
    request = "Move the file to the archive, then copy it back"
    chosen = index.choose(request, 12, lead=2)
    names = chosen.names
    assert set(names[:2]) == {"fs_0", "fs_1"}  # move, copy: the lead
    kin = [pick for pick in chosen.picks if pick.kin_of == "mcp:fs"]
    assert {pick.name for pick in kin} == {f"fs_{i}" for i in range(2, 8)}
    # One part (the round is the lead): nothing more comes.
    assert len(index.choose("Move the file to the archive", 2, lead=2).names) == 2


def test_a_large_source_or_one_outside_the_allowlist_brings_no_kin() -> None:
    large = kin_catalog(40)
    chosen = large.choose("Move the file to the archive, then copy it back", 12, lead=2)
    assert not any(pick.kin_of for pick in chosen.picks)
    small = kin_catalog(8)
    allowed = {"fs_0", "fs_1", "fs_2"}
    chosen = small.choose("Move the file, then copy it back", 12, allowed, lead=2)
    assert set(chosen.names) <= allowed


def wide_and_deep(width: int, depth: int) -> dict[str, Any]:
    """A hostile answer schema: ``width`` fields a level, ``depth`` levels."""
    if depth == 0:
        return {"type": "string"}
    inner = wide_and_deep(width, depth - 1)
    return {"type": "object", "properties": {f"f{i}_id": inner for i in range(width)}}


class Visited(Mapping[str, Any]):
    """An answer schema ``width`` fields wide and ``depth`` deep, made as it is walked
    (one object a level, shared), counting the fields walked."""

    def __init__(self, width: int, depth: int, seen: list[int]) -> None:
        self._width, self._depth, self._seen = width, depth, seen

    def _properties(self) -> Iterator[tuple[str, Any]]:
        inner = Visited(self._width, self._depth - 1, self._seen) if self._depth else {}
        for i in range(self._width):
            self._seen[0] += 1
            yield f"f{i}_id", inner

    def __getitem__(self, key: str) -> Any:
        if key == "properties":
            return dict(self._properties()) if self._width <= 64 else _Lazy(self)
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(("properties",))

    def __len__(self) -> int:
        return 1


class _Lazy(Mapping[str, Any]):
    def __init__(self, of: Visited) -> None:
        self._of = of

    def items(self) -> Any:
        return self._of._properties()

    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self._of._properties())

    def __len__(self) -> int:
        return self._of._width


def test_a_huge_answer_schema_is_walked_only_so_far() -> None:
    seen = [0]
    maker = tool("make", label="mcp:x")
    maker.returns = Visited(20_000, 1, seen)  # 20,000 fields a level, two levels
    consumer = tool("ship", needs={"f3_id": "The id."}, label="mcp:x")
    assert producers([consumer, maker], split) == {"ship": ("make",)}
    assert seen[0] < 1_000  # not 4 * 10**8


def test_an_openapi_answer_keeps_a_bounded_number_of_fields() -> None:
    document = {
        "openapi": "3.1.0",
        "paths": {
            "/x": {
                "get": {
                    "operationId": "getX",
                    "responses": {
                        "200": {"content": {"application/json": {"schema": wide_and_deep(20, 2)}}}
                    },
                }
            }
        },
    }
    [found] = openapi(document)

    def count(schema: Any) -> int:
        properties = schema.get("properties", {})
        return len(properties) + sum(count(inner) for inner in properties.values())

    assert found.returns is not None
    assert count(found.returns) == 256  # of 420, past which nothing more is kept


def test_a_tools_parameter_descriptions_are_read_only_so_far() -> None:
    filler = "word " * 120
    maker = tool("make_thing", returns=["done"])

    def consumer(mention_at: int) -> HttpTool:
        needs = {f"p{i}": filler for i in range(6)}
        needs[f"p{mention_at}"] = "Take it from make thing. " + filler
        return tool("use", needs=needs)

    assert producers([consumer(0), maker], split) == {"use": ("make_thing",)}
    # Past the first 512 words of its descriptions, a tool's mention is not read.
    assert producers([consumer(5), maker], split) == {}
