"""The operator console in a real browser (Chromium, headless, through Playwright):
signing in through its form, the tenants and tools pages, a tool's hostile words shown
as text and never run, and a form posted to it from another site refused with the
operator still signed in. Screenshots of each page, at a desktop and a narrow width, go
to ``TOOLGATE_SCREENSHOTS`` (else the test's temporary folder): not committed, looked at."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
from starlette.responses import HTMLResponse
from starlette.routing import Route

from tests.e2e.test_console_e2e import HeldCalls, console_config
from tests.e2e.test_inventory_e2e import ADMIN_KEY, APPROVER_KEY, HOSTILE
from tests.support.oidc import Browser
from tests.support.recorder import Answer, Recorder
from tests.support.scripted import (
    TENANT_KEY,
    Harness,
    Model,
    asks,
    call,
    chat,
    says,
    tool,
)

LONG = "A description that goes on. " * 8000  # about 220 kB of a tool's own words
LINK = '<a href="javascript:alert(2)">click</a> <img src=x onerror=alert(3)>'


def _console(harness: Harness) -> str:
    upstream = harness.serve(Model().recorder).url
    data = console_config(upstream)
    data["tools"].append(tool("long_words", "http://tools.test/long") | {"description": LONG})
    data["tools"].append(tool("odd_link", "http://tools.test/odd") | {"description": LINK})
    data["tenants"][0]["tools"] = ["*"]
    return harness.gateway(data).url


WIDE = "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"


def _shots(page: Any, folder: Path, name: str) -> None:
    """Screenshots at a desktop's width and a phone's, and neither scrolls sideways:
    whatever a page holds (a megabyte of a tool's words, a long id) wraps or scrolls
    inside its own box."""
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(folder / f"console-{name}-{width}.png"), full_page=False)
        scrolled, shown = page.evaluate(WIDE)
        wide = page.evaluate(
            "[...document.querySelectorAll('body *')].filter(e => e.scrollWidth > e.clientWidth"
            " && getComputedStyle(e).overflowX === 'visible').slice(-3)"
            ".map(e => e.outerHTML.slice(0, 120))"
        )
        assert scrolled <= shown, f"{name} at {width} px is {scrolled} px wide: {wide}"


def _browser_page(harness: Harness, who: str) -> Any:
    """A page of a headless Chromium of the test's own, closed with the test."""
    browser = Browser()
    harness.on_close(browser.close)
    return browser.page(who)


def _nav(page: Any, name: str) -> None:
    """Click a page's name in the console's header and wait for it."""
    page.click(f"header >> text={name}")
    page.wait_for_url(f"**/console/{name.lower()}")


def _sign_in(page: Any, base: str, key: str) -> None:
    page.goto(f"{base}/console")
    assert page.url.endswith("/console/sign-in")
    page.fill("#key", key)
    page.click("button[type=submit]")
    page.wait_for_url("**/console/overview")


def test_an_operator_signs_in_and_reads_tenants_and_tools(harness: Harness, tmp_path: Path) -> None:
    folder = Path(os.environ.get("TOOLGATE_SCREENSHOTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    base = _console(harness)
    page = _browser_page(harness, "operator")
    dialogs: list[str] = []

    def on_dialog(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    page.goto(f"{base}/console/sign-in")
    _shots(page, folder, "sign-in")
    page.set_viewport_size({"width": 1280, "height": 900})
    page.fill("#key", "sk-not-a-key")
    page.click("button[type=submit]")
    assert page.locator("[role=alert]").inner_text() == "That key is not an operator's key."
    _sign_in(page, base, ADMIN_KEY)
    _nav(page, "Tenants")
    assert page.locator("h2").all_inner_texts() == ["acme", "beta"]
    _shots(page, folder, "tenants")
    page.set_viewport_size({"width": 1280, "height": 900})
    page.click("text=4 tools")
    page.wait_for_url("**/console/tools?tenant=acme")
    names = page.locator(".tool .name").all_inner_texts()
    assert names == ["read_ticket", "create_ticket", "long_words", "odd_link"]
    descriptions = page.locator(".tool .description").all_inner_texts()
    assert descriptions[1] == HOSTILE  # shown as the text it is
    assert descriptions[3] == LINK
    assert page.locator(".tool a, .tool img, .tool script").count() == 0
    _shots(page, folder, "tools")
    page.fill("#q", "ticket")
    page.click("text=Show")
    assert page.locator(".tool .name").all_inner_texts() == ["read_ticket", "create_ticket"]
    assert dialogs == []  # no script of a tool's ran
    page.click("text=Sign out")
    page.wait_for_url("**/console/sign-in")
    page.goto(f"{base}/console/tenants")
    assert page.url.endswith("/console/sign-in")


def test_an_approver_sees_its_tenant_only(harness: Harness) -> None:
    base = _console(harness)
    page = _browser_page(harness, "approver")
    _sign_in(page, base, APPROVER_KEY)
    _nav(page, "Tenants")
    assert page.locator("h2").all_inner_texts() == ["acme"]
    page.goto(f"{base}/console/tools?tenant=beta")
    assert page.locator("h1").inner_text() == "Not found"


def test_a_form_posted_from_another_site_is_refused(harness: Harness) -> None:
    base = _console(harness)
    # Another site (``localhost`` is not ``127.0.0.1`` to a browser): a page that posts
    # the console's sign-out form as soon as it loads.
    attack = (
        f'<form id="f" method="post" action="{base}/console/sign-out">'
        '<input name="csrf" value="guessed"></form>'
        "<script>document.getElementById('f').submit()</script>"
    )

    async def evil(request: Any) -> HTMLResponse:
        return HTMLResponse(attack)

    from starlette.applications import Starlette

    other = harness.serve(Starlette(routes=[Route("/", evil)])).url.replace(
        "127.0.0.1", "localhost"
    )
    page = _browser_page(harness, "operator")
    _sign_in(page, base, ADMIN_KEY)
    refused: list[int] = []
    page.on(
        "response",
        lambda r: refused.append(r.status) if r.url.endswith("/console/sign-out") else None,
    )
    page.goto(f"{other}/")
    page.wait_for_url(f"{base}/console/sign-out")
    assert refused == [403]
    page.goto(f"{base}/console/tenants")
    assert page.url.endswith("/console/tenants")  # still signed in


def test_an_approver_approves_a_held_call_and_the_waiting_run_finishes(
    harness: Harness, tmp_path: Path
) -> None:
    held = HeldCalls(harness)
    base = held.base
    page = _browser_page(harness, "approver")
    _sign_in(page, base, APPROVER_KEY)
    _nav(page, "Approvals")
    assert page.locator(".empty").count() == 1
    run = held.start({"title": "refund <b>42</b>"})
    # Live: the held call shows up on the page as it is, without reloading it.
    page.wait_for_selector("section.approval", timeout=15_000)
    assert page.locator(".approval .tool").inner_text() == "create_ticket"
    assert '"title": "refund <b>42</b>"' in page.locator(".arguments").inner_text()
    assert held.tickets.hits == []  # held: nothing sent yet
    folder = Path(os.environ.get("TOOLGATE_SCREENSHOTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    _shots(page, folder, "approvals")
    page.set_viewport_size({"width": 1280, "height": 900})
    page.fill("input[name=reason]", "checked with the customer")
    page.click("button[value=yes]")
    page.wait_for_url("**/console/approvals")
    run.join(timeout=30)
    assert len(held.answers) == 1
    assert held.answers[0].status_code == 200, held.answers[0].text
    sent = [parse_qs(urlsplit(hit.raw_path).query) for hit in held.tickets.hits]
    assert sent == [{"title": ["refund <b>42</b>"]}]
    assert page.locator(".empty").count() == 1  # the queue is empty again
    decided = page.locator("tr.decision")
    assert decided.count() == 1
    assert "approved" in decided.inner_text()
    assert "checked with the customer" in decided.inner_text()


def test_a_card_another_operator_decided_says_who_and_why_and_offers_nothing(
    harness: Harness,
) -> None:
    """Two operators on the Approvals page with one call waiting: the approver decides
    it; the admin's page, without a reload, says who decided and why and offers no
    buttons; its countdown moved meanwhile, and the card links to the run."""
    from playwright.sync_api import expect

    held = HeldCalls(harness)
    base = held.base
    browser = Browser()
    harness.on_close(browser.close)
    admin, approver = browser.page("admin"), browser.page("approver")  # contexts of their own
    _sign_in(admin, base, ADMIN_KEY)
    _sign_in(approver, base, APPROVER_KEY)
    run = held.start({"title": "refund 7"})
    for page in (admin, approver):
        _nav(page, "Approvals")
        page.wait_for_selector("section.approval.waiting", timeout=15_000)
    countdown = admin.locator(".countdown")
    drawn = countdown.inner_text()
    assert drawn.startswith("Waiting ")
    assert "refused in" in drawn
    expect(countdown).not_to_have_text(drawn, timeout=15_000)  # it moves
    link = admin.locator("section.approval a.run")
    assert link.get_attribute("href", timeout=1_000).startswith("/console/runs/acme/")
    approver.fill("input[name=reason]", "the customer asked")
    approver.click("button[value=yes]")
    approver.wait_for_url("**/console/approvals")
    run.join(timeout=30)
    ended = admin.locator("section.approval .ended")
    expect(ended).to_contain_text("Approved by operator:", timeout=15_000)
    assert "“the customer asked”" in ended.inner_text()
    assert admin.locator("section.approval button").count() == 0
    expect(admin.locator("tr.decision")).to_have_count(1, timeout=15_000)
    request_id = held.answers[0].headers["x-request-id"]
    assert link.get_attribute("href") == f"/console/runs/acme/{request_id}"
    link.click()
    admin.wait_for_url(f"**/console/runs/acme/{request_id}")
    assert admin.locator("h1").inner_text() == f"Run {request_id}"
    # The call's wait for the approver is drawn before it, in its lane.
    assert admin.locator("svg.timeline .wait rect").count() == 1
    assert admin.locator("svg.timeline .call text").text_content() == "create_ticket"


def test_an_operator_follows_a_run_sees_a_spent_budget_and_replays_it(
    harness: Harness, tmp_path: Path
) -> None:
    """A real tool round spends the tenant's day: the overview counts it, the tenant
    shows its budget spent, the run's timeline shows its rounds and call, and the
    recording replayed against another model is reported side by side."""
    folder = Path(os.environ.get("TOOLGATE_SCREENSHOTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    hostile = '<script>alert(1)</script><a href="javascript:alert(2)">open</a>' * 16_000
    answer = json.dumps({"title": "<b>printer</b> jammed", "notes": hostile}).encode()
    assert len(answer) > 1_000_000  # a megabyte of a tool's hostile words
    tickets = Recorder(lambda hit: Answer(body=answer))
    tools_url = harness.serve(tickets).url

    def reader(body: dict[str, Any]) -> dict[str, Any]:
        if body["messages"][-1]["role"] == "tool":
            return says("The printer is jammed.")
        ticket = "T-2" if body["model"] == "other-upstream" else "T-1"
        return asks(call("read_ticket", f'{{"id": "{ticket}"}}'))

    model = Model(reader)
    data = console_config(harness.serve(model.recorder).url, tools_url=tools_url)
    upstream = data["models"][0]["upstream"]
    data["models"].append(
        {"name": "gpt-other", "upstream": upstream, "upstream_model": "other-upstream"}
    )
    data["policy"]["tools"][0]["cost_usd"] = 0.25  # read_ticket is priced
    acme = data["tenants"][0]
    acme |= {"models": ["*"], "record": "all", "budget": {"cost_usd_per_day": 0.25}}
    base = harness.gateway(data).url
    asked = httpx.post(
        f"{base}/v1/chat/completions",
        json=chat("What does T-1 say?"),
        headers={"authorization": f"Bearer {TENANT_KEY}"},
        timeout=30,
    )
    assert asked.status_code == 200, asked.text
    request_id = asked.headers["x-request-id"]
    page = _browser_page(harness, "operator")
    errors: list[str] = []  # what the browser refused (a CSP violation) or failed at
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))

    def on_dialog(dialog: Any) -> None:  # a script of a tool's ran: never
        errors.append(f"dialog: {dialog.message}")
        dialog.dismiss()

    page.on("dialog", on_dialog)
    _sign_in(page, base, ADMIN_KEY)

    acme_charts = page.locator("#overview-1 .total").all_inner_texts()
    assert acme_charts[:4] == ["1", "0", "1", "$0.2500"]
    assert acme_charts[4].endswith(" ms")  # the mean time a request took
    assert page.locator("tr.probe.ok").count() == 2
    _shots(page, folder, "overview")
    page.set_viewport_size({"width": 1280, "height": 900})

    _nav(page, "Tenants")
    spent = page.locator("#tenant-1 .spent-out")
    assert spent.count() == 1
    assert "$0.0000 of $0.2500 left" in spent.inner_text()
    assert "spent" in spent.inner_text()

    _nav(page, "Runs")
    assert page.locator("tr.run").count() == 1
    _shots(page, folder, "runs")
    page.set_viewport_size({"width": 1280, "height": 900})
    page.click(f"a[href$='/runs/acme/{request_id}']")
    page.wait_for_url(f"**/console/runs/acme/{request_id}")
    assert page.locator("svg.timeline rect").count() == 3
    assert page.locator("svg.timeline .call text").text_content() == "read_ticket"
    page.click("text=Arguments and result")
    result = page.locator("pre.result").inner_text()
    assert "<b>printer</b> jammed" in result  # as text
    assert "<script>alert(1)</script>" in result
    assert page.locator("td b, td a, td script, pre a").count() == 0
    _shots(page, folder, "run")
    page.set_viewport_size({"width": 1280, "height": 900})

    _nav(page, "Replay")
    page.check("#run-1")
    page.select_option("#model", "gpt-other")
    page.click("text=Replay >> nth=-1")
    page.wait_for_selector("section.report")
    assert "0 of 1 agree" in page.locator(".summary").inner_text()
    assert page.locator("section.report.differ li.call.different").count() == 1
    answers = page.locator("section.report pre.answer").all_inner_texts()
    assert answers == ["The printer is jammed.", "The printer is jammed."]
    _shots(page, folder, "replay")
    page.set_viewport_size({"width": 1280, "height": 900})

    _nav(page, "Configuration")
    assert page.locator("tr.probe.ok").count() == 2
    _shots(page, folder, "configuration")
    page.set_viewport_size({"width": 1280, "height": 900})
    _nav(page, "Audit")  # the sign-in and the replay, who and from where
    assert page.locator("tr.entry .what").all_inner_texts() == ["replay", "sign-in"]
    _shots(page, folder, "audit")
    page.set_viewport_size({"width": 1280, "height": 900})
    # The overview keeps itself up to date: a request made now is counted there.
    page.goto(f"{base}/console/overview")
    assert page.evaluate("typeof htmx") == "object"  # the pinned script loaded and ran
    httpx.post(
        f"{base}/v1/chat/completions",
        json=chat("What does T-1 say?"),
        headers={"authorization": f"Bearer {TENANT_KEY}"},
        timeout=30,
    )
    from playwright.sync_api import expect

    expect(page.locator("#overview-1 .total").first).to_have_text("2", timeout=30_000)
    assert errors == []
