"""Tool search (docs/design.md §17): with more tools in play than ``auto_above``, a round
offers the ``always`` tools, the best matches for the conversation and
``toolgate_search_tools``, which the gateway answers itself; what a search finds is
offered from the next round on. Driven by the stock SDK on both surfaces, streamed or
not, against a scripted model that searches, and recording tool servers that show
which calls were made."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.support.recorder import Answer, Received, Recorder
from tests.support.scripted import (
    MODEL,
    OTHER_KEY,
    TENANT_KEY,
    Harness,
    Model,
    asks,
    call,
    config,
    says,
)
from tests.support.servers import ServerThread

from .test_responses_e2e import sdk

SEARCH = "toolgate_search_tools"
# A catalog of 48 tools, each one thing a business API does.
CATALOG = [
    ("weather_forecast", "Get the weather forecast for a city for the next days."),
    ("currency_convert", "Convert an amount of money from one currency to another."),
    ("stock_quote", "Get the latest trading price of a stock by its ticker symbol."),
    ("flight_search", "Find flights between two airports on a date."),
    ("hotel_booking", "Book a hotel room in a city for given nights."),
    ("translate_text", "Translate a text into another language."),
    ("send_email", "Send an email message to a recipient."),
    ("calendar_create_event", "Create an event in the user's calendar."),
    ("calendar_list_events", "List the events of the user's calendar for a day."),
    ("crm_find_customer", "Find a customer record in the CRM by name or email."),
    ("crm_update_customer", "Update a customer's record in the CRM."),
    ("invoice_create", "Create an invoice for a customer."),
    ("invoice_list", "List the invoices of a customer."),
    ("payment_refund", "Refund a payment to the card it was paid with."),
    ("shipment_track", "Track a parcel shipment by its tracking number."),
    ("inventory_level", "Get the stock level of a product in the warehouse."),
    ("ticket_create", "Open a support ticket for a customer problem."),
    ("ticket_close", "Close a support ticket once it is resolved."),
    ("repo_list_issues", "List the open issues of a code repository."),
    ("repo_create_pull_request", "Open a pull request on a code repository."),
    ("ci_run_status", "Get the status of the latest continuous integration run."),
    ("deploy_service", "Deploy a service version to production."),
    ("logs_search", "Search the application logs for a pattern."),
    ("metrics_query", "Query a monitoring metric over a time range."),
    ("dns_lookup", "Look up the DNS records of a domain name."),
    ("whois_domain", "Get the registration details of a domain."),
    ("news_headlines", "Get today's news headlines on a topic."),
    ("recipe_find", "Find cooking recipes with given ingredients."),
    ("nutrition_facts", "Get the nutrition facts of a food."),
    ("movie_showtimes", "List cinema showtimes for a movie in a city."),
    ("restaurant_reserve", "Reserve a table at a restaurant."),
    ("ride_request", "Request a taxi ride from one address to another."),
    ("map_directions", "Get driving directions between two places."),
    ("timezone_convert", "Convert a time from one time zone to another."),
    ("unit_convert", "Convert a quantity between units of measure."),
    ("dictionary_define", "Give the definition of an English word."),
    ("wiki_summary", "Summarise the encyclopedia article on a subject."),
    ("image_caption", "Describe what an image shows."),
    ("pdf_extract_text", "Extract the text of a PDF document."),
    ("spreadsheet_read", "Read the cells of a spreadsheet range."),
    ("password_reset", "Send a password reset link to a user."),
    ("user_lookup", "Find a user account by its login."),
    ("vacation_request", "Request days off work for an employee."),
    ("payroll_payslip", "Get an employee's payslip for a month."),
    ("expense_submit", "Submit an expense report with receipts."),
    ("contract_sign", "Send a contract for electronic signature."),
    ("survey_results", "Summarise the answers to a customer survey."),
    ("lottery_numbers", "Get the winning lottery numbers of a draw."),
]


def tools_for(url: str) -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "description": about,
            "parameters": {
                "type": "object",
                "properties": {"q": {"type": "string", "description": "What to look up."}},
            },
            "http": {"url": f"{url}/{name}", "query": {"q": "{q}"}},
        }
        for name, about in CATALOG
    ]


def answer_tools(hit: Received) -> Answer:
    return Answer(body=json.dumps({"tool": hit.raw_path.split("?")[0][1:]}).encode())


def offered(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools", [])]


def searching_model(query: str, wanted: str, arguments: dict[str, Any] | None = None) -> Model:
    """A model that searches for ``query`` first, calls ``wanted`` once it is offered,
    and answers with what the call gave."""

    def script(body: dict[str, Any]) -> dict[str, Any]:
        last = body["messages"][-1]
        names = offered(body)
        if last["role"] == "tool" and wanted in names and last.get("tool_call_id") == "c_use":
            return says(f"result: {last['content']}")
        if wanted in names:
            return asks(call(wanted, arguments or {"q": "x"}, "c_use"))
        return asks(call(SEARCH, {"query": query}, "c_search"))

    return Model(script)


class Stack:
    def __init__(
        self,
        harness: Harness,
        model: Model,
        tools: Callable[[str], list[dict[str, Any]]] = tools_for,
        **extra: Any,
    ) -> None:
        self.tools = Recorder(answer_tools)
        tools_url = harness.serve(self.tools).url
        self.model = model
        upstream = harness.serve(model.recorder).url
        upstreams = extra.pop("more_upstreams", [])
        models = extra.pop("more_models", [])
        data = config(upstream, tools(tools_url), **extra)
        data["upstreams"] += upstreams
        data["models"] += models
        self.data = data
        self.gateway: ServerThread = harness.gateway(data)
        self.client = sdk(harness, self.gateway)
        self.harness = harness

    def hits(self) -> list[str]:
        return [h.raw_path.split("?")[0][1:] for h in self.tools.hits]

    def trace(self, request_id: str, key: str = TENANT_KEY) -> dict[str, Any]:
        url = f"{self.gateway.url}/v1/toolgate/traces/{request_id}"
        for _ in range(50):
            answer = httpx.get(url, headers={"authorization": f"Bearer {key}"})
            if answer.status_code == 200:
                found: dict[str, Any] = answer.json()
                return found
            time.sleep(0.05)
        raise AssertionError(f"no trace of {request_id}")


def chat_round(stack: Stack, text: str, stream: bool, **params: Any) -> tuple[str, str, str]:
    """The answer's text, its request id and its tools-offered header."""
    messages: Any = [{"role": "user", "content": text}]
    if not stream:
        raw = stack.client.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, **params
        )
        answer = raw.parse()
        return (
            answer.choices[0].message.content or "",
            raw.headers["x-request-id"],
            (raw.headers["x-toolgate-tools-offered"]),
        )
    with stack.client.chat.completions.with_streaming_response.create(
        model=MODEL, messages=messages, stream=True, **params
    ) as response:
        text = "".join(
            chunk.choices[0].delta.content or ""
            for chunk in response.parse()
            if chunk.choices and chunk.choices[0].delta
        )
        return text, response.headers["x-request-id"], response.headers["x-toolgate-tools-offered"]


@pytest.mark.parametrize("stream", [False, True])
def test_the_first_round_offers_the_best_matches_and_the_search_and_a_found_tool_runs(
    harness: Harness, stream: bool
) -> None:
    stack = Stack(harness, searching_model("convert money currency", "currency_convert"))
    text, request_id, count = chat_round(stack, "What is 10 euros in yen? And the weather?", stream)
    assert text == 'result: {"tool":"currency_convert"}'
    assert stack.hits() == ["currency_convert"]

    first, second, third = stack.model.requests
    # The first round: the search function and at most ``preselect`` (10) of the 48,
    # and ``per_part`` (4) more for the request's second part.
    assert SEARCH in offered(first)
    assert 1 < len(offered(first)) <= 10 + 4 + 1
    assert count == str(len(offered(first)))
    assert "lottery_numbers" not in offered(first)
    # The search's answer names what it found; from then on it is offered.
    [search_result] = [m["content"] for m in second["messages"] if m["role"] == "tool"]
    found = json.loads(search_result)
    assert found["tools"][0]["name"] == "currency_convert"
    assert found["tools"][0]["description"].startswith("Convert an amount of money")
    assert "currency_convert" in offered(second)
    assert "currency_convert" in offered(third)
    assert len(offered(second)) <= 33  # ``max_loaded`` and the search

    trace = stack.trace(request_id)
    rounds = trace["rounds"]
    assert rounds[0]["tools_offered"] == [n for n in offered(first) if n != SEARCH]
    assert rounds[0]["searches"] == [
        {"query": "convert money currency", "found": [t["name"] for t in found["tools"]]}
    ]
    assert "searches" not in rounds[1]
    names = [c["name"] for c in trace["tool_calls"]]
    assert names == [SEARCH, "currency_convert"]


def test_the_conversation_chooses_the_first_round_tools(harness: Harness) -> None:
    stack = Stack(harness, Model(says("ok")))
    chat_round(stack, "Track my parcel shipment, tracking number 1Z999", False)
    [body] = stack.model.requests
    names = offered(body)
    assert names[0] == "shipment_track"  # the catalog's order; search last
    assert names[-1] == SEARCH
    definition = body["tools"][-1]["function"]
    assert "catalog of 48 tools" in definition["description"]
    assert definition["parameters"]["required"] == ["query"]


def test_search_is_off_for_a_tenant_that_turns_it_off_and_for_few_tools(harness: Harness) -> None:
    tenants = [
        {"id": "acme", "keys": [TENANT_KEY], "tools": ["*"], "tool_search": {"mode": "off"}},
        {"id": "beta", "keys": [OTHER_KEY], "tools": ["crm_*", "invoice_*"]},
    ]
    stack = Stack(harness, Model(says("ok")), tenants=tenants)
    chat_round(stack, "hello", False)
    assert len(offered(stack.model.requests[0])) == 48  # off: everything, as before
    beta = sdk(harness, stack.gateway, OTHER_KEY)
    raw = beta.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "hello"}]
    )
    assert raw.headers["x-toolgate-tools-offered"] == "4"
    assert sorted(offered(stack.model.requests[1])) == [
        "crm_find_customer",
        "crm_update_customer",
        "invoice_create",
        "invoice_list",
    ]  # auto, and 4 tools in play: no search


def test_always_tools_are_offered_in_every_round_and_max_loaded_bounds_a_round(
    harness: Harness,
) -> None:
    search = {"always": ["lottery_*"], "max_loaded": 3, "preselect": 2}
    model = searching_model("calendar events", "calendar_create_event")
    stack = Stack(harness, model, tool_search=search)
    chat_round(stack, "Put lunch with Ann in my calendar", False)
    for body in model.requests:
        names = offered(body)
        assert "lottery_numbers" in names
        assert len(names) <= 4  # three tools and the search
    assert stack.hits() == ["calendar_create_event"]


def test_only_tools_the_request_may_use_are_found_or_run(harness: Harness) -> None:
    tenants = [
        {"id": "acme", "keys": [TENANT_KEY], "tools": ["*"]},
        {
            "id": "beta",
            "keys": [OTHER_KEY],
            "tools": ["c*", "i*", "d*", "p*", "s*"],  # not weather_forecast, not lottery
            "tool_search": {"mode": "on"},
        },
    ]

    def script(body: dict[str, Any]) -> dict[str, Any]:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return says(last["content"])
        return asks(
            call(SEARCH, {"query": "weather forecast lottery"}, "c_1"),
            call("weather_forecast", {"q": "Paris"}, "c_2"),
        )

    model = Model(script)
    stack = Stack(harness, model, tenants=tenants)
    beta = sdk(harness, stack.gateway, OTHER_KEY)
    beta.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "weather?"}])
    searched, refused = model.tool_results()
    assert json.loads(searched)["tools"] == []  # what it may not use is never found
    assert "not available" in refused
    assert "weather_forecast" not in refused  # and never named
    assert stack.hits() == []
    assert all("weather_forecast" not in offered(b) for b in model.requests)


def test_a_tool_in_play_not_offered_yet_is_still_run_by_the_policy_point(
    harness: Harness,
) -> None:
    model = Model(asks(call("lottery_numbers", {"q": "last"}, "c_1")), says("done"))
    stack = Stack(harness, model)
    chat_round(stack, "Track my parcel shipment", False)
    assert "lottery_numbers" not in offered(model.requests[0])
    assert stack.hits() == ["lottery_numbers"]
    assert "lottery_numbers" in offered(model.requests[1])  # used: it stays offered


def test_client_tools_are_always_offered_as_sent(harness: Harness) -> None:
    mine: Any = {
        "type": "function",
        "function": {
            "name": "open_drawer",
            "description": "Open a drawer of the user's desk.",
            "parameters": {"type": "object", "properties": {}},
        },
    }
    stack = Stack(harness, Model(says("ok")))
    chat_round(stack, "Track my parcel shipment", False, tools=[mine])
    [body] = stack.model.requests
    assert body["tools"][-1] == mine
    assert len(body["tools"]) <= 10


@pytest.mark.parametrize("stream", [False, True])
def test_responses_surface_searches_too(harness: Harness, stream: bool) -> None:
    stack = Stack(harness, searching_model("stock ticker price", "stock_quote"))
    response: Any
    if stream:
        with stack.client.responses.stream(model=MODEL, input="Hi there.") as events:
            response = events.get_final_response()
    else:
        response = stack.client.responses.create(model=MODEL, input="Hi there.")
    assert response.output_text == 'result: {"tool":"stock_quote"}'
    assert stack.hits() == ["stock_quote"]
    assert [m["role"] for m in stack.model.requests[-1]["messages"]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]


def test_bad_searches_get_clear_results_in_bounded_time(harness: Harness) -> None:
    huge = "convert currency " + "\u202e(.*)+[" * 200_000  # 1.4 MB of regex and bidi tricks

    def script(body: dict[str, Any]) -> dict[str, Any]:
        if body["messages"][-1]["role"] == "tool":
            return says("done")
        return asks(
            call(SEARCH, {"query": 42}, "c_1"),
            call(SEARCH, {"query": ""}, "c_2"),
            call(SEARCH, {"query": huge}, "c_3"),
            call(SEARCH, "{not json", "c_4"),
        )

    model = Model(script)
    stack = Stack(harness, model)
    started = time.process_time()  # the gateway's thread's CPU too; not another's load
    chat_round(stack, "hi", False)
    assert time.process_time() - started < 5
    not_text, empty, hostile, broken = model.tool_results()
    assert "query" in json.loads(not_text)["error"]
    assert json.loads(empty)["tools"] == []
    assert json.loads(hostile)["tools"][0]["name"] == "currency_convert"
    assert "error" in json.loads(broken)


def test_metrics_count_searches_and_the_bytes_saved(harness: Harness) -> None:
    stack = Stack(harness, searching_model("convert money currency", "currency_convert"))
    chat_round(stack, "10 euros in yen?", False)
    text = httpx.get(f"{stack.gateway.url}/metrics").text
    lines = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line.startswith("toolgate_tool_search")
    }
    assert lines['toolgate_tool_searches_total{found="true",tenant="acme"}'] == 1
    full = sum(len(json.dumps(t)) for t in tools_for("http://x"))  # about what all would weigh
    saved = lines['toolgate_tool_search_bytes_saved_total{tenant="acme"}']
    assert saved > 3 * full / 2  # three rounds, each well under half of everything


def test_found_tools_stay_offered_across_a_hand_back(harness: Harness) -> None:
    drawer: Any = {
        "type": "function",
        "function": {
            "name": "open_drawer",
            "description": "Open a drawer of the user's desk.",
            "parameters": {"type": "object", "properties": {}},
        },
    }
    model = Model(
        asks(
            call(SEARCH, {"query": "convert money currency"}, "c_search"),
            call("open_drawer", {}, "c_drawer"),
        ),
        says("done"),
    )
    stack = Stack(harness, model)
    asked: Any = [{"role": "user", "content": "Hi."}]
    handed = stack.client.chat.completions.create(model=MODEL, messages=asked, tools=[drawer])
    message = handed.choices[0].message
    assert [c.model_dump()["function"]["name"] for c in message.tool_calls or []] == ["open_drawer"]
    back: Any = [
        *asked,
        message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": "c_drawer", "content": "opened"},
    ]
    stack.client.chat.completions.create(model=MODEL, messages=back, tools=[drawer])
    first, second = model.requests
    assert "currency_convert" not in offered(first)
    assert "currency_convert" in offered(second)  # the search put back with its turn
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "tool", "tool"]


def test_a_searched_run_is_recorded_with_the_tools_it_offered_and_replays(
    harness: Harness,
) -> None:
    replaying = Model(asks(call("currency_convert", {"q": "EUR"}, "c_1")), says("Hm."))
    other = harness.serve(replaying.recorder).url
    stack = Stack(
        harness,
        searching_model("convert money currency", "currency_convert"),
        recordings={"record": "all"},
        server={"admin_key": "admin-CANARY-36"},
        more_upstreams=[{"name": "other", "base_url": f"{other}/v1", "max_retries": 0}],
        more_models=[{"name": "other", "upstream": "other"}],
    )
    _, request_id, _ = chat_round(stack, "10 euros in yen?", False)
    exported = httpx.get(
        f"{stack.gateway.url}/v1/toolgate/recordings",
        headers={"authorization": f"Bearer {TENANT_KEY}"},
    )
    [recorded] = [json.loads(line) for line in exported.text.splitlines()]
    names = [tool["definition"]["function"]["name"] for tool in recorded["tools"]]
    assert "currency_convert" in names
    assert SEARCH not in names
    assert len(names) <= 32  # what was offered or called, not the catalog of 48

    stack.tools.clear()
    admin = {"authorization": "Bearer admin-CANARY-36"}
    body = {"model": "other", "tenant": "acme", "request_ids": [request_id]}
    answer = httpx.post(f"{stack.gateway.url}/v1/toolgate/replays", json=body, headers=admin)
    assert answer.status_code == 200, answer.text
    (report,) = answer.json()["reports"]
    [replayed] = report["calls"]  # the recorded search is the gateway's: not compared
    assert (replayed["name"], replayed["verdict"]) == ("currency_convert", "different")
    assert replayed["recorded_arguments"] == [{"q": "x"}]
    assert sorted(offered(replaying.requests[0])) == sorted(names)  # the recorded tools
    assert stack.hits() == []  # a replay serves what was recorded


def test_no_rule_holds_taints_or_prices_the_search_but_found_tools_are_judged(
    harness: Harness,
) -> None:
    """The search reads the catalog and changes nothing: a rule over every tool that
    asks for approval, marks output untrusted or prices calls does not touch it; the
    tools it finds are judged like any call."""
    policy = {
        "tools": [
            {"tools": ["*"], "output": "untrusted", "cost_usd": 1},
            {"tools": ["currency_convert"], "effects": "write"},
            {"tools": ["stock_quote"], "approval": "always"},
        ],
        "after_untrusted": "refuse",
    }

    def script(body: dict[str, Any]) -> dict[str, Any]:
        results = [m for m in body["messages"] if m["role"] == "tool"]
        if not results:
            return asks(
                call(SEARCH, {"query": "currency"}, "c_1"),
                call(SEARCH, {"query": "stock price"}, "c_2"),
            )
        if len(results) == 2:  # a write after two searches: the run is not tainted
            return asks(call("currency_convert", {"q": "EUR"}, "c_3"))
        if len(results) == 3:
            return asks(call("stock_quote", {"q": "ACME"}, "c_4"))
        return says("done")

    model = Model(script)
    # $1.50 a run: two priced searches and the write would be $3, the write alone $1.
    tenants = [
        {
            "id": "acme",
            "keys": [TENANT_KEY],
            "tools": ["*"],
            "limits": {"max_cost_usd_per_request": 1.5},
        }
    ]
    stack = Stack(harness, model, policy=policy, tenants=tenants)
    chat_round(stack, "hi", False)
    first, second = model.tool_results(1)
    assert json.loads(first)["tools"][0]["name"] == "currency_convert"
    assert json.loads(second)["tools"][0]["name"] == "stock_quote"
    assert stack.hits() == ["currency_convert"]  # the write ran: no taint before it
    [*_, held] = model.tool_results(-1)
    assert "needs a person's approval" in held  # a found tool is judged as any
