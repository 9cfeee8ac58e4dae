"""The operator console in a real browser (Chromium, headless, through Playwright):
signing in through its form, the tenants and tools pages, a tool's hostile words shown
as text and never run, and a form posted to it from another site refused with the
operator still signed in. Screenshots of each page, at a desktop and a narrow width, go
to ``TOOLGATE_SCREENSHOTS`` (else the test's temporary folder): not committed, looked at."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from starlette.responses import HTMLResponse
from starlette.routing import Route

from tests.e2e.test_console_e2e import HeldCalls, console_config
from tests.e2e.test_inventory_e2e import ADMIN_KEY, APPROVER_KEY, HOSTILE
from tests.support.oidc import Browser
from tests.support.scripted import (
    Harness,
    Model,
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


def _shots(page: Any, folder: Path, name: str) -> None:
    for width in (1280, 375):
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(folder / f"console-{name}-{width}.png"), full_page=False)


def _sign_in(page: Any, base: str, key: str) -> None:
    page.goto(f"{base}/console")
    assert page.url.endswith("/console/sign-in")
    page.fill("#key", key)
    page.click("button[type=submit]")
    page.wait_for_url("**/console/tenants")


def test_an_operator_signs_in_and_reads_tenants_and_tools(harness: Harness, tmp_path: Path) -> None:
    folder = Path(os.environ.get("TOOLGATE_SCREENSHOTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    base = _console(harness)
    browser = Browser()
    harness.on_close(browser.close)
    page = browser.page("operator")
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
    browser = Browser()
    harness.on_close(browser.close)
    page = browser.page("approver")
    _sign_in(page, base, APPROVER_KEY)
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
    browser = Browser()
    harness.on_close(browser.close)
    page = browser.page("operator")
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
    browser = Browser()
    harness.on_close(browser.close)
    page = browser.page("approver")
    _sign_in(page, base, APPROVER_KEY)
    page.click("text=Approvals")
    assert page.locator(".empty").count() == 1
    run = held.start({"title": "refund <b>42</b>"})
    for _ in range(100):
        page.goto(f"{base}/console/approvals")
        if page.locator("section.approval").count():
            break
        time.sleep(0.1)
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
