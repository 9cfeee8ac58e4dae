"""The operator console's guards (docs/design.md §19), against a real gateway over HTTP: off
unless enabled; signed in with an operator's key only (a tenant's API key is not one);
a session cookie that is HttpOnly, SameSite=Strict and under /console; a strict CSP and
no framing on every page; posts only from the console's own pages, with their CSRF
token; an approver sees its own tenant only; hostile tool words escaped; a key taken out
of the configuration ends its sessions at once. The browser's view of the same pages is
``tests/browser/test_console_browser.py``."""

from __future__ import annotations

import hashlib
import html
import json
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

from gateway import GatewayConfig, create_app
from tests.e2e.test_inventory_e2e import ADMIN_KEY, APPROVER_KEY, HOSTILE
from tests.e2e.test_inventory_e2e import _config as inventory_config
from tests.support.recorder import Recorder
from tests.support.scripted import (
    SECRETS,
    TENANT_KEY,
    Harness,
    Model,
    chat,
    tool_then_answer,
)


def console_config(
    upstream: str, enabled: bool = True, tools_url: str | None = None
) -> dict[str, Any]:
    """The inventory's configuration with the console on (or off); its tools answered at
    ``tools_url`` (a recording server) where one is given."""
    data = inventory_config(upstream)
    data["console"] = {"enabled": enabled}
    if tools_url is not None:
        for spec in data["tools"]:
            spec["http"]["url"] = spec["http"]["url"].replace("http://tools.test", tools_url)
    return data


class Operator:
    """A browser-like client of the console: it keeps cookies and says where its posts
    come from, as a browser does."""

    def __init__(self, harness: Harness, base: str) -> None:
        self.harness = harness
        self.base = base
        self.client = httpx.Client(base_url=base, timeout=10, follow_redirects=False)
        harness.on_close(self.client.close)

    def post(self, path: str, fields: dict[str, str], origin: str | None = None) -> httpx.Response:
        headers = {"origin": origin or self.base, "sec-fetch-site": "same-origin"}
        return self.client.post(path, data=fields, headers=headers)

    def sign_in(self, key: str) -> httpx.Response:
        form = self.client.get("/console/sign-in")
        assert form.status_code == 200, form.text
        token = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert token is not None
        return self.post("/console/sign-in", {"csrf": token.group(1), "key": key})

    def csrf(self) -> str:
        page = self.client.get("/console/tenants")
        found = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert found is not None, page.text
        return found.group(1)


def _serve(harness: Harness, enabled: bool = True) -> str:
    upstream = harness.serve(Model().recorder).url
    return harness.gateway(console_config(upstream, enabled)).url


def test_the_console_is_off_unless_enabled(harness: Harness) -> None:
    operator = Operator(harness, _serve(harness, enabled=False))
    for path in ("/console", "/console/sign-in", "/console/tenants", "/console/tools"):
        assert operator.client.get(path).status_code == 404
    assert operator.post("/console/sign-in", {"key": ADMIN_KEY}).status_code == 404


def test_signing_in_takes_an_operators_key_and_sets_a_strict_cookie(harness: Harness) -> None:
    operator = Operator(harness, _serve(harness))
    assert operator.client.get("/console/tenants").headers["location"] == "/console/sign-in"
    for key in (TENANT_KEY, "sk-made-up", ""):
        refused = operator.sign_in(key)
        assert refused.status_code == 401
        assert "toolgate_console=" not in refused.headers.get("set-cookie", "")
    answer = operator.sign_in(ADMIN_KEY)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/console/overview"
    cookie = next(
        c for c in answer.headers.get_list("set-cookie") if c.startswith("toolgate_console=")
    )
    flags = {part.strip().lower() for part in cookie.split(";")[1:]}
    assert {"httponly", "samesite=strict", "path=/console"} <= flags
    page = operator.client.get("/console/tenants")
    assert page.status_code == 200
    assert "acme" in page.text
    assert "beta" in page.text
    csp = page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in csp
    assert "default-src 'none'" in csp
    assert "script-src 'self';" in csp  # the console's own pinned script only
    assert "unsafe" not in csp  # nothing inline, no eval
    assert page.headers["x-frame-options"] == "DENY"
    for secret in (*SECRETS, ADMIN_KEY, APPROVER_KEY):
        assert secret not in page.text


def test_a_post_from_another_site_or_without_its_token_is_refused(harness: Harness) -> None:
    operator = Operator(harness, _serve(harness))
    assert operator.sign_in(ADMIN_KEY).status_code == 303
    token = operator.csrf()
    assert (
        operator.post("/console/sign-out", {"csrf": token}, "http://evil.test").status_code == 403
    )
    cross = operator.client.post(
        "/console/sign-out", data={"csrf": token}, headers={"sec-fetch-site": "cross-site"}
    )
    assert cross.status_code == 403
    assert operator.post("/console/sign-out", {"csrf": "forged"}).status_code == 403
    assert operator.post("/console/sign-out", {}).status_code == 403
    assert operator.client.get("/console/tenants").status_code == 200  # still signed in
    # A sign-in form posted from elsewhere, or without the form's token, signs in no one.
    fresh = Operator(harness, operator.base)
    assert fresh.post("/console/sign-in", {"key": ADMIN_KEY}).status_code == 403
    out = operator.post("/console/sign-out", {"csrf": token})
    assert out.status_code == 303
    assert operator.client.get("/console/tenants").status_code == 303  # to the sign-in page


def test_an_approver_sees_its_own_tenant_and_hostile_words_are_escaped(harness: Harness) -> None:
    operator = Operator(harness, _serve(harness))
    assert operator.sign_in(APPROVER_KEY).status_code == 303
    tenants = operator.client.get("/console/tenants").text
    assert "acme" in tenants
    assert "beta" not in tenants
    tools = operator.client.get("/console/tools")
    assert tools.status_code == 200
    assert HOSTILE not in tools.text  # never as markup
    assert html.escape(HOSTILE, quote=False) in tools.text
    assert operator.client.get("/console/tools?tenant=beta").status_code == 404
    found = operator.client.get("/console/tools?q=READ").text
    assert "read_ticket" in found
    assert "create_ticket" not in found


def test_a_key_taken_out_ends_its_sessions(harness: Harness, tmp_path: Path) -> None:
    upstream = harness.serve(Model().recorder).url
    data = console_config(upstream)
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(data))
    app = create_app(GatewayConfig.model_validate(data), config_path=path)
    operator = Operator(harness, harness.serve(app).url)
    assert operator.sign_in(APPROVER_KEY).status_code == 303
    assert operator.client.get("/console/tenants").status_code == 200
    data["tenants"][0]["policy"]["approvals"]["admin_keys"] = []
    path.write_text(yaml.safe_dump(data))
    reloaded = operator.client.post(
        "/admin/reload", headers={"authorization": f"Bearer {ADMIN_KEY}"}
    )
    assert reloaded.status_code == 200, reloaded.text
    assert operator.client.get("/console/tenants").status_code == 303


class HeldCalls:
    """A gateway whose ``create_ticket`` calls wait for an operator (the inventory
    configuration, its tools on a recording server), and runs sent to it in threads."""

    def __init__(
        self, harness: Harness, change: Callable[[dict[str, Any]], object] | None = None
    ) -> None:
        self.tickets = Recorder()
        tools_url = harness.serve(self.tickets).url
        self.model = Model(tool_then_answer("create_ticket"))
        data = console_config(harness.serve(self.model.recorder).url, tools_url=tools_url)
        if change is not None:
            change(data)
        self.base = harness.gateway(data).url
        self.answers: list[httpx.Response] = []

    def start(self, arguments: dict[str, Any]) -> threading.Thread:
        """A run whose model asks for ``create_ticket`` with ``arguments``, under way."""

        def run() -> None:
            self.answers.append(
                httpx.post(
                    f"{self.base}/v1/chat/completions",
                    json=chat(json.dumps(arguments)),
                    headers={"authorization": f"Bearer {TENANT_KEY}"},
                    timeout=30,
                )
            )

        thread = threading.Thread(target=run)
        thread.start()
        return thread


def test_a_denied_call_is_refused_and_a_second_decision_does_not_stand(harness: Harness) -> None:
    held = HeldCalls(harness)
    operator = Operator(harness, held.base)
    assert operator.sign_in(APPROVER_KEY).status_code == 303
    run = held.start({"title": "wipe"})
    action = None
    for _ in range(100):
        found = re.search(
            r'action="(/console/approvals/[^"]+)"', operator.client.get("/console/approvals").text
        )
        if found:
            action = found.group(1)
            break
        time.sleep(0.1)
    assert action is not None
    token = operator.csrf()
    assert operator.post(action, {"csrf": "forged", "approve": "no"}).status_code == 403
    denied = operator.post(action, {"csrf": token, "approve": "no", "reason": "not today"})
    assert denied.status_code == 303
    again = operator.post(action, {"csrf": token, "approve": "yes"})
    assert again.status_code in (404, 409)  # decided already, or taken by its run
    run.join(timeout=30)
    assert held.answers[0].status_code == 200, held.answers[0].text
    assert held.tickets.hits == []  # denied: never sent
    results = held.model.tool_results()
    assert len(results) == 1
    assert "denied by the operator" in results[0]
    assert "The reason given: not today" in results[0]
    # What was decided, by whom and when: once, in the history, on the page and as JSON.
    history = httpx.get(
        f"{held.base}/v1/toolgate/approvals/decided",
        headers={"authorization": f"Bearer {ADMIN_KEY}"},
        timeout=10,
    )
    assert history.status_code == 200, history.text
    [decided] = history.json()["data"]
    approver = f"operator:{hashlib.sha256(APPROVER_KEY.encode()).hexdigest()[:8]}"
    assert decided["tool"] == "create_ticket"
    assert decided["approve"] is False
    assert decided["reason"] == "not today"
    assert decided["decider"] == approver
    assert json.loads(decided["arguments"]) == {"title": "wipe"}
    assert decided["asked_at"] <= decided["decided_at"] <= time.time()
    page = operator.client.get("/console/approvals").text
    assert page.count('<tr class="decision denied">') == 1
    assert approver in page
    assert "not today" in page
    tenant_key = {"authorization": f"Bearer {TENANT_KEY}"}
    refused = httpx.get(f"{held.base}/v1/toolgate/approvals/decided", headers=tenant_key)
    assert refused.status_code == 401


def test_a_store_that_does_not_answer_is_a_503_page_not_a_500(
    harness: Harness, private_redis: tuple[str, subprocess.Popen[bytes]]
) -> None:
    url, redis_process = private_redis
    upstream = harness.serve(Model().recorder).url
    data = console_config(upstream) | {"store": {"url": url, "timeout_s": 0.1}}
    operator = Operator(harness, harness.gateway(data).url)
    assert operator.sign_in(ADMIN_KEY).status_code == 303
    redis_process.send_signal(signal.SIGSTOP)  # hung: takes the connection, never answers
    try:
        for path in ("/console/tenants", "/console/approvals"):
            page = operator.client.get(path)  # answered while the store stays hung
            assert page.status_code == 503
            assert "does not answer now" in page.text
            assert page.headers["content-security-policy"].startswith("default-src 'none'")
    finally:
        redis_process.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + 5  # the store's client reconnects; the session is kept
    while operator.client.get("/console/tenants").status_code != 200:
        assert time.monotonic() < deadline, "the console did not come back with its store"
        time.sleep(0.2)


def test_the_admin_reloads_the_configuration_from_its_page(
    harness: Harness, tmp_path: Path
) -> None:
    upstream = harness.serve(Model().recorder).url
    data = console_config(upstream)
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(data))
    app = create_app(GatewayConfig.model_validate(data), config_path=path)
    base = harness.serve(app).url
    approver = Operator(harness, base)
    assert approver.sign_in(APPROVER_KEY).status_code == 303
    assert approver.client.get("/console/configuration").status_code == 404
    denied = approver.post("/console/configuration/reload", {"csrf": approver.csrf()})
    assert denied.status_code == 403
    admin = Operator(harness, base)
    assert admin.sign_in(ADMIN_KEY).status_code == 303
    page = admin.client.get("/console/configuration")
    assert page.status_code == 200
    assert "up (127.0.0.1)" in page.text
    data["tools"].append({"name": "third", "http": {"url": "http://tools.test/third"}})
    path.write_text(yaml.safe_dump(data))
    reloaded = admin.post("/console/configuration/reload", {"csrf": admin.csrf()})
    assert reloaded.status_code == 200
    assert "Reloaded: 3 tools." in reloaded.text
    path.write_text("upstreams: [")  # broken: the running configuration stays
    failed = admin.post("/console/configuration/reload", {"csrf": admin.csrf()})
    assert failed.status_code == 422
    assert "Not reloaded; the running configuration stays." in failed.text
    assert "third" in admin.client.get("/console/tools?tenant=acme").text
