"""Tool search cannot be stuffed (issue 47 §7).

The attack: a hostile source's tool whose description is the catalog's words (the
most a tool is indexed under) matches most requests a little, and was preselected in
the first four for 35 of 41 requests that describe other tools, so its description
reached most first rounds. A tool whose text reaches past three times the catalog's
median distinct words pays for it in its score, and a preselection offers only tools
that fit (a fifth of the best score or more): the stuffed tool is preselected for none
of them here, and every request still finds its own tool."""

from __future__ import annotations

import re

import pytest

from gateway.config import ToolSearchConfig
from gateway.policy.tool_search import Catalogs
from gateway.values import Message
from tool_registry import FIT, HttpTool, ToolRegistry, ToolSpec

# (name, description, a request that needs it and no other)
CATALOG = [
    (
        "weather_forecast",
        "Get the weather forecast for a city over the next days.",
        "Will it rain in Lisbon this weekend?",
    ),
    (
        "currency_convert",
        "Convert an amount of money from one currency to another at today's rate.",
        "How much is 500 US dollars in euros?",
    ),
    (
        "flight_search",
        "Search flights between two airports on a date.",
        "Find me flights from Boston to Denver on May 3.",
    ),
    (
        "hotel_book",
        "Book a hotel room in a city for given nights.",
        "Reserve a hotel room in Rome for three nights.",
    ),
    (
        "calendar_add_event",
        "Add an event to the user's calendar with a start time.",
        "Put a dentist appointment in my calendar for Tuesday at 9.",
    ),
    (
        "email_send",
        "Send an email message to a recipient with a subject and body.",
        "Email Sarah that the report is ready.",
    ),
    (
        "stock_quote",
        "Get the latest stock price quote for a ticker symbol.",
        "What is Apple's share price right now?",
    ),
    (
        "translate_text",
        "Translate text from one language into another language.",
        "Translate 'good morning' into Japanese.",
    ),
    (
        "recipe_find",
        "Find cooking recipes by ingredient or dish name.",
        "Give me a recipe that uses chickpeas.",
    ),
    (
        "movie_showtimes",
        "List cinema showtimes for a movie near a location.",
        "When is Dune playing at cinemas near me?",
    ),
    (
        "restaurant_reserve",
        "Reserve a table at a restaurant for a party size and time.",
        "Book a table for four at an Italian restaurant at 8pm.",
    ),
    (
        "package_track",
        "Track a shipped package by its carrier tracking number.",
        "Where is my parcel with tracking number 1Z999?",
    ),
    (
        "news_headlines",
        "Get the top news headlines for a topic or country.",
        "What are today's headlines about technology?",
    ),
    (
        "timezone_convert",
        "Convert a time from one time zone to another.",
        "What time is 3pm Tokyo time in London?",
    ),
    (
        "bmi_calculate",
        "Calculate body mass index from weight and height.",
        "Compute my BMI, I weigh 70 kg and I'm 1.75 m tall.",
    ),
    (
        "loan_payment",
        "Calculate the monthly payment of a loan from principal, rate and term.",
        "What would I pay each month on a 200k mortgage at 5% for 30 years?",
    ),
    (
        "unit_convert",
        "Convert a quantity between units of length, mass or volume.",
        "How many pounds is 12 kilograms?",
    ),
    (
        "dictionary_define",
        "Look up the definition of an English word.",
        "What does the word 'ephemeral' mean?",
    ),
    (
        "wikipedia_summary",
        "Summarize the Wikipedia article on a subject.",
        "Tell me about the history of the Roman aqueducts from Wikipedia.",
    ),
    (
        "traffic_status",
        "Report current road traffic conditions on a route.",
        "Is there a traffic jam on the I-95 right now?",
    ),
    (
        "parking_find",
        "Find available parking garages near an address.",
        "Where can I park near the stadium?",
    ),
    (
        "song_identify",
        "Identify a song from a snippet of its lyrics.",
        "Which song has the lyrics 'is this the real life'?",
    ),
    (
        "playlist_create",
        "Create a music playlist from a list of tracks.",
        "Make a playlist with my favourite jazz tracks.",
    ),
    (
        "fitness_log_workout",
        "Log a workout session with its exercise and duration.",
        "Log that I ran for 30 minutes this morning.",
    ),
    (
        "sleep_report",
        "Summarize last night's sleep from the wearable's data.",
        "How well did I sleep last night?",
    ),
    (
        "invoice_create",
        "Create an invoice for a customer with line items.",
        "Bill Acme Corp for 10 hours of consulting.",
    ),
    (
        "expense_report",
        "File an expense report with receipts and amounts.",
        "Submit my taxi receipts from the conference as expenses.",
    ),
    (
        "crm_find_customer",
        "Look up a customer record in the CRM by name or email.",
        "Pull up the customer record for jane@example.com.",
    ),
    (
        "ticket_create",
        "Open a support ticket describing a problem.",
        "Open a ticket: the login page is broken.",
    ),
    (
        "password_reset",
        "Send a password reset link to a user account.",
        "I forgot my password, please reset it.",
    ),
    ("vpn_connect", "Connect the device to the corporate VPN.", "Get me onto the company VPN."),
    (
        "printer_status",
        "Check the status and ink levels of an office printer.",
        "Is the third floor printer out of toner?",
    ),
    (
        "room_book",
        "Book a meeting room in the office for a time slot.",
        "Reserve a conference room for our standup at 10.",
    ),
    (
        "holiday_list",
        "List the public holidays of a country in a year.",
        "Which days are public holidays in Germany in 2027?",
    ),
    (
        "earthquake_recent",
        "List recent earthquakes above a magnitude near a region.",
        "Were there any earthquakes near Chile this week?",
    ),
    (
        "air_quality",
        "Get the air quality index and pollutants for a city.",
        "How polluted is the air in Delhi today?",
    ),
    (
        "tide_times",
        "Give the high and low tide times for a coastal place.",
        "When is high tide in Brighton tomorrow?",
    ),
    (
        "sunrise_sunset",
        "Give sunrise and sunset times for a location and date.",
        "What time does the sun set in Oslo on June 21?",
    ),
    (
        "lottery_results",
        "Get the winning numbers of the latest lottery draw.",
        "What were last night's lottery numbers?",
    ),
    (
        "horoscope_daily",
        "Get the daily horoscope for a zodiac sign.",
        "What's the horoscope for Leo today?",
    ),
    (
        "chess_puzzle",
        "Fetch a chess puzzle of a given difficulty.",
        "Give me a hard chess puzzle to solve.",
    ),
]


def _tool(name: str, description: str) -> HttpTool:
    spec = ToolSpec(
        name=name,
        description=description,
        parameters={"type": "object", "properties": {"q": {"type": "string"}}},
        http={"url": "http://127.0.0.1:9/unused"},
    )
    return HttpTool(spec, source="test")


def _preselected(tools: list[HttpTool], request: str, preselect: int = 4) -> tuple[str, ...]:
    registry = ToolRegistry(tools)
    catalog = Catalogs.build(registry).of(
        registry.names, ToolSearchConfig(mode="on", preselect=preselect, max_loaded=8), frozenset()
    )
    assert catalog is not None
    return catalog.preselected([Message("user", request)]).names


def _stuffed() -> HttpTool:
    """Every word of the catalog, as a description (the index reads 512 words at most)."""
    seen: list[str] = []
    for name, description, _ in CATALOG:
        for word in re.findall(r"[A-Za-z]+", f"{name.replace('_', ' ')} {description}"):
            if word.lower() not in seen:
                seen.append(word.lower())
    return _tool("helper_tools", " ".join(seen))


def test_a_description_stuffed_with_the_catalogs_words_is_not_preselected() -> None:
    honest = [_tool(name, description) for name, description, _ in CATALOG]
    tools = [*honest, _stuffed()]
    stuffed_in = 0
    for name, _, request in CATALOG:
        found = _preselected(tools, request)
        stuffed_in += "helper_tools" in found
        # Each request's own tool is found as it is without the stuffed one (a few are
        # not, either way: their words differ from its description's).
        assert (name in found) == (name in _preselected(honest, request)), request
    assert stuffed_in <= 2, f"the stuffed tool was preselected for {stuffed_in} of {len(CATALOG)}"


@pytest.mark.parametrize("index", [2, 3, 4, 5, 6])
def test_a_request_still_finds_its_own_tool_first(index: int) -> None:
    tools = [_tool(n, d) for n, d, _ in CATALOG] + [_stuffed()]
    name, _, request = CATALOG[index]
    assert _preselected(tools, request)[0] == name


def test_a_model_search_ranks_the_stuffed_tool_below_the_one_that_fits() -> None:
    """The stuffed tool pays for its reach in a plain ranking too."""
    registry = ToolRegistry([_tool(n, d) for n, d, _ in CATALOG] + [_stuffed()])
    index = Catalogs.build(registry).index
    found = index.search("book a hotel room in a city", 3)
    assert found[0] == "hotel_book"
    assert "helper_tools" not in found


def test_every_ranking_a_model_or_an_operator_reads_is_cut_as_a_preselection() -> None:
    """Issue 62 §8: the model's search function and the console's find box ranked the
    stuffed description in their first four for 18 of 41 requests about other tools;
    they are cut to what fits (``FIT``) as a preselection is."""
    tools = [*(_tool(n, d) for n, d, _ in CATALOG), _stuffed()]
    registry = ToolRegistry(tools)
    catalogs = Catalogs.build(registry)
    catalog = catalogs.of(
        registry.names, ToolSearchConfig(mode="on", preselect=4, max_loaded=8), frozenset()
    )
    assert catalog is not None
    allowed = frozenset(registry.names)
    by_model = by_operator = 0
    for _, _, request in CATALOG:
        by_model += "helper_tools" in catalog.tool.search(request, 4)
        found = catalogs.index.search(request, len(allowed), allowed, FIT)[:4]
        by_operator += "helper_tools" in found
    assert by_model <= 2, f"the model's search ranked it first four for {by_model}"
    assert by_operator <= 2, f"the find box ranked it first four for {by_operator}"
