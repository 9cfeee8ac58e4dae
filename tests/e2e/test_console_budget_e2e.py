"""The console's page budget in normal use (issue 52 §1): its stylesheet and script are
named by their hash, kept by the browser and never counted; a signed-in page's live
updates are counted apart from its pages, per session; a page refused for the budget
says so and when to come back."""

from __future__ import annotations

import re

from tests.e2e.test_console_e2e import Operator, console_config
from tests.e2e.test_inventory_e2e import ADMIN_KEY
from tests.support.scripted import Harness, Model

POLL = {"hx-request": "true", "hx-current-url": "http://x/console/approvals"}


def _serve(harness: Harness, pages: int, polls: int) -> str:
    data = console_config(harness.serve(Model().recorder).url)
    data["console"] |= {"pages_per_minute": pages, "polls_per_minute": polls}
    return harness.gateway(data).url


def _assets(page: str) -> list[str]:
    return re.findall(r'(?:href|src)="(/console/static/[^"]+)"', page)


def test_assets_are_named_by_their_hash_cached_and_not_counted(harness: Harness) -> None:
    operator = Operator(harness, _serve(harness, pages=5, polls=100))
    operator.sign_in(ADMIN_KEY)  # two pages of five: the form and its post
    page = operator.client.get("/console/tenants")  # three
    assets = _assets(page.text)
    assert len(assets) == 2
    assert all(re.search(r"\.[0-9a-f]{16}\.", url) for url in assets), assets
    for _ in range(20):  # a browser without a cache, loading them again and again
        for url in assets:
            answer = operator.client.get(url)
            assert answer.status_code == 200
            assert answer.headers["cache-control"] == "public, max-age=31536000, immutable"
            assert answer.headers["x-content-type-options"] == "nosniff"
    assert operator.client.get("/console/runs").status_code == 200  # four
    assert operator.client.get("/console/static/console.css").status_code == 404  # five
    refused = operator.client.get("/console/tools")
    assert refused.status_code == 429


def test_live_updates_are_counted_apart_per_session(harness: Harness) -> None:
    base = _serve(harness, pages=6, polls=30)
    operator = Operator(harness, base)
    operator.sign_in(ADMIN_KEY)  # two pages
    for _ in range(30):  # an Approvals tab left open: its polls
        assert operator.client.get("/console/approvals", headers=POLL).status_code == 200
    assert operator.client.get("/console/runs").status_code == 200  # a click still goes
    refused = operator.client.get("/console/approvals", headers=POLL)
    assert refused.status_code == 429
    assert int(refused.headers["retry-after"]) >= 1
    assert "more than 30 live updates within a minute" in refused.text
    # Without a session the header buys nothing: the poll is a page of the address.
    stranger = Operator(harness, base)
    answers = [stranger.client.get("/console/approvals", headers=POLL) for _ in range(4)]
    assert [a.status_code for a in answers] == [303, 303, 303, 429]


def test_a_page_refused_for_the_budget_says_so(harness: Harness) -> None:
    operator = Operator(harness, _serve(harness, pages=3, polls=100))
    operator.sign_in(ADMIN_KEY)
    assert operator.client.get("/console/tenants").status_code == 200
    refused = operator.client.get("/console/runs")
    assert refused.status_code == 429
    seconds = int(refused.headers["retry-after"])
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", refused.text))
    assert "This browser asked for more than 3 console pages within a minute." in text
    assert f"Wait {seconds} s, then reload the page." in text
    assert "<h1>Too many requests</h1>" in refused.text
