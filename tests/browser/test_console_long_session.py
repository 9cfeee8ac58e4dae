"""Two tabs of the console left open for ten minutes (issue 52 §1): an idle Approvals
tab polling, and a busy one clicked to a new page every two seconds. The ten minutes
are a fast clock's: the browser's timers (Playwright's clock) and the page budget's
(the memory store's) move together, two seconds a step. Not one answer is a 429, and
the idle tab really was live all along."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.test_console_e2e import console_config
from tests.e2e.test_inventory_e2e import ADMIN_KEY
from tests.support.oidc import Browser
from tests.support.scripted import Harness, Model

MINUTES = 10
STEP_MS = 2_000
PAGES = ("Runs", "Overview", "Tenants", "Tools")


def test_two_tabs_left_open_ten_minutes_never_meet_a_429(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway.store.memory import MemoryStore

    browser = Browser()  # first: without a Chromium, the test skips here
    harness.on_close(browser.close)
    moved = [0.0]  # ms the fast clock is ahead of the real one
    real = MemoryStore._now_ms
    monkeypatch.setattr(MemoryStore, "_now_ms", staticmethod(lambda: real() + moved[0]))
    base = harness.gateway(console_config(harness.serve(Model().recorder).url)).url

    idle = browser.page("operator")
    context = idle.context
    answers: list[tuple[int, str, bool]] = []

    def seen(response: Any) -> None:
        polled = response.request.headers.get("hx-request") == "true"
        answers.append((response.status, response.url, polled))

    context.on("response", seen)
    context.clock.install()
    idle.goto(f"{base}/console/sign-in")
    idle.fill("#key", ADMIN_KEY)
    idle.click("button[type=submit]")
    idle.wait_for_url("**/console/overview")
    idle.click("header >> text=Approvals")
    idle.wait_for_url("**/console/approvals")
    busy = context.new_page()
    busy.set_default_timeout(15_000)
    busy.goto(f"{base}/console/runs")

    for step in range(MINUTES * 60_000 // STEP_MS):
        moved[0] += STEP_MS
        context.clock.run_for(STEP_MS)
        name = PAGES[step % len(PAGES)]
        busy.click(f"header >> text={name}")
        busy.wait_for_url(f"**/console/{name.lower()}")

    refused = [(status, url) for status, url, _ in answers if status == 429]
    assert refused == []
    polls = [url for status, url, polled in answers if polled and "/approvals" in url]
    # Every 3 s while idle; each poll's swap lands at the next 2 s step, and the next
    # poll is 3 s after it: one every 4 s of the fast clock.
    assert len(polls) >= MINUTES * 60 // 4 * 0.9, len(polls)
    clicks = [url for status, url, polled in answers if not polled and "/static/" not in url]
    assert len(clicks) >= MINUTES * 60_000 // STEP_MS
    assert idle.locator(".empty").count() == 1  # still the live page, styled and whole
    assert busy.locator("h1").count() == 1
