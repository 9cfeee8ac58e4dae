"""The console's overview, health, check and replay (docs/design.md §19), JSON first, against
a real gateway over HTTP: the last hour's counts per tenant (every replica's, through
the store), the approvals waiting now, the probe's words for each server, what
``toolgate check`` finds, and recordings replayed against a model with the report side
by side. What a tool or a model says is hostile text, escaped on every page."""

from __future__ import annotations

import re
from typing import Any

import httpx

from tests.e2e.test_console_e2e import Operator, console_config
from tests.e2e.test_inventory_e2e import ADMIN_KEY, APPROVER_KEY
from tests.support.recorder import Answer, Recorder
from tests.support.scripted import (
    OTHER_KEY,
    TENANT_KEY,
    Harness,
    Model,
    asks,
    call,
    chat,
    says,
)

HOSTILE = "<script>alert(1)</script>"


def reader(body: dict[str, Any]) -> dict[str, Any]:
    """Reads ticket T-1 and answers; ``gpt-other`` reads T-2 (so its replay differs)."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return says(f"{HOSTILE} done")
    ticket = "T-2" if body["model"] == "other-upstream" else "T-1"
    return asks(call("read_ticket", f'{{"id": "{ticket}"}}'))


class Stack:
    def __init__(self, harness: Harness) -> None:
        self.tickets = Recorder(lambda hit: Answer(body=b'{"title": "printer"}'))
        tools_url = harness.serve(self.tickets).url
        self.model = Model(reader)
        data = console_config(harness.serve(self.model.recorder).url, tools_url=tools_url)
        data["models"].append(
            {
                "name": "gpt-other",
                "upstream": data["models"][0]["upstream"],
                "upstream_model": "other-upstream",
            }
        )
        data["tenants"][0]["models"] = ["*"]
        data["tenants"][0]["record"] = "all"
        self.base = harness.gateway(data).url

    def ask(self, key: str = TENANT_KEY, **extra: Any) -> httpx.Response:
        return httpx.post(
            f"{self.base}/v1/chat/completions",
            json=chat("read T-1", **extra),
            headers={"authorization": f"Bearer {key}"},
            timeout=30,
        )

    def get(self, path: str, key: str = ADMIN_KEY, **params: str) -> httpx.Response:
        return httpx.get(
            f"{self.base}{path}", params=params, headers={"authorization": f"Bearer {key}"}
        )


def test_the_overview_counts_the_last_hour_per_tenant(harness: Harness) -> None:
    stack = Stack(harness)
    for _ in range(3):
        assert stack.ask().status_code == 200
    assert stack.ask(model="no-such-model").status_code == 404
    assert stack.ask(OTHER_KEY).status_code == 200
    answer = stack.get("/v1/toolgate/overview")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    rows = {row["id"]: row for row in body["tenants"]}
    assert set(rows) == {"acme", "beta"}
    acme = rows["acme"]
    assert len(acme["requests"]) == 60
    assert acme["totals"]["requests"] == 4
    assert acme["totals"]["errors"] == 1
    assert acme["totals"]["tool_calls"] == 3
    assert acme["requests"][-1] + acme["requests"][-2] == 4  # this minute (or the last)
    assert acme["pending_approvals"] == 0
    assert rows["beta"]["totals"]["requests"] == 1
    # The mean time a request took, as the runs list has each: the hour's and a minute's.
    runs = stack.get("/v1/toolgate/runs", tenant="acme").json()["data"]
    mean = sum(round(r["latency_ms"]) for r in runs) / len(runs)
    assert abs(acme["totals"]["latency_ms"] - mean) <= 1
    assert max(acme["latency_ms"][-2:]) > 0
    own = stack.get("/v1/toolgate/overview", APPROVER_KEY).json()
    assert [row["id"] for row in own["tenants"]] == ["acme"]
    assert stack.get("/v1/toolgate/overview", TENANT_KEY).status_code == 401

    operator = Operator(harness, stack.base)
    assert operator.sign_in(ADMIN_KEY).headers["location"] == "/console/overview"
    page = operator.client.get("/console/overview")
    assert page.status_code == 200, page.text
    charts = re.findall(
        r'<figure class="chart (\w+)">.*?<strong class="total">([^<]+)<', page.text, re.S
    )
    assert charts[:5] == [
        ("requests", "4"),
        ("errors", "1"),
        ("tool_calls", "3"),
        ("cost_usd", "$0.0000"),
        ("latency_ms", f"{acme['totals']['latency_ms']:,} ms"),
    ]
    assert 'class="probe ok"' in page.text  # the admin sees the servers' health
    approver = Operator(harness, stack.base)
    approver.sign_in(APPROVER_KEY)
    mine = approver.client.get("/console/overview").text
    assert "<h2>acme" in mine
    assert "beta" not in mine
    assert "Servers and sources" not in mine  # the admin key's only


def test_health_and_check_say_what_the_probe_and_check_found(harness: Harness) -> None:
    stack = Stack(harness)
    health = stack.get("/v1/toolgate/health")
    assert health.status_code == 200, health.text
    probes = {(p["kind"], p["ok"]) for p in health.json()["probes"]}
    assert probes == {("model server", True), ("tools", True)}
    (tools,) = [p for p in health.json()["probes"] if p["kind"] == "tools"]
    assert tools["detail"].startswith("reachable (its root answered HTTP")  # not "ok: … 404"
    assert stack.get("/v1/toolgate/health", APPROVER_KEY).status_code == 404
    summary = stack.get("/v1/toolgate/configuration").json()
    # gpt-test has no price while acme has a budget: check says so.
    assert any("price" in finding for finding in summary["findings"]), summary["findings"]

    operator = Operator(harness, stack.base)
    operator.sign_in(ADMIN_KEY)
    page = operator.client.get("/console/configuration")
    assert "toolgate check" in page.text
    assert page.text.count('class="probe ok"') == 2
    token = operator.csrf()
    checked = operator.post("/console/configuration/check", {"csrf": token})
    assert checked.status_code == 200
    assert "Probed just now." in checked.text
    assert operator.post("/console/configuration/check", {"csrf": "forged"}).status_code == 403


def test_recordings_are_replayed_against_another_model_side_by_side(harness: Harness) -> None:
    stack = Stack(harness)
    first = stack.ask().headers["x-request-id"]
    second = stack.ask().headers["x-request-id"]
    operator = Operator(harness, stack.base)
    operator.sign_in(ADMIN_KEY)
    page = operator.client.get("/console/replay", params={"tenant": "acme"})
    assert page.status_code == 200, page.text
    listed = re.findall(r'name="(run-\d+)" value="([^"]+)"', page.text)
    assert [value for _, value in listed] == [second, first]  # newest first
    token = operator.csrf()
    fields = {"csrf": token, "tenant": "acme", "model": "gpt-other"}
    fields |= {name: value for name, value in listed}
    reported = operator.post("/console/replay", fields)
    assert reported.status_code == 200, reported.text
    assert "0 of 2 agree" in reported.text
    assert reported.text.count('<section class="report differ">') == 2
    assert "different" in reported.text
    assert HOSTILE not in reported.text  # the models' answers, escaped
    assert "&lt;script&gt;" in reported.text
    # More checked than one replay runs: the first 20, and the page says so.
    many = {f"run-{n}": f"req_gone_{n}" for n in range(30)}
    capped = operator.post("/console/replay", fields | many)
    assert capped.status_code == 200, capped.text
    assert "The first 20 of the 30 checked were replayed." in capped.text
    assert capped.text.count("no kept recording") == 20
    nothing = operator.post("/console/replay", {"csrf": token, "tenant": "acme", "model": "x"})
    assert nothing.status_code == 400
    approver = Operator(harness, stack.base)
    approver.sign_in(APPROVER_KEY)
    assert approver.client.get("/console/replay").status_code == 404
    assert approver.post("/console/replay", fields | {"csrf": approver.csrf()}).status_code == 403
