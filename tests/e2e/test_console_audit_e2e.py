"""The audit log (issue 52 §3): sign-ins (the refused ones too), decisions made in the
console and through the JSON route, reloads, probes and sign-outs, each with who (an
approver's key by its name), when and from where; on the admin's Audit page and as a
line on the ``toolgate.audit`` logger; never a key."""

from __future__ import annotations

import io
import json
import logging
import re
import time
from typing import Any

import httpx
import pytest

from gateway.ops.logs import JsonFormatter
from tests.e2e.test_console_e2e import HeldCalls, Operator
from tests.e2e.test_inventory_e2e import ADMIN_KEY, APPROVER_KEY
from tests.support.scripted import Harness
from tool_registry import FIELDS


def _named(data: dict[str, Any]) -> None:
    approvals = data["tenants"][0]["policy"]["approvals"]
    approvals["admin_keys"] = [{"name": "alice", "key": APPROVER_KEY}]


def _action(operator: Operator) -> str:
    for _ in range(200):
        page = operator.client.get("/console/approvals").text
        found = re.search(r'action="(/console/approvals/[^"]+)"', page)
        if found:
            return found.group(1)
        time.sleep(0.05)
    raise AssertionError("no call was held")


def _rows(page: str) -> list[list[str]]:
    rows = re.findall(r'<tr class="entry">(.*?)</tr>', page, re.S)
    return [
        [re.sub(r"\s+", " ", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)]
        for r in rows
    ]


def test_sign_ins_decisions_and_reloads_are_audited_by_name(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="toolgate.audit")
    written = io.StringIO()  # the lines as the gateway writes them (JSON, in context)
    handler = logging.StreamHandler(written)
    handler.setFormatter(JsonFormatter())
    logging.getLogger("toolgate.audit").addHandler(handler)
    harness.on_close(lambda: logging.getLogger("toolgate.audit").removeHandler(handler))
    held = HeldCalls(harness, _named)
    approver, admin = Operator(harness, held.base), Operator(harness, held.base)
    assert approver.sign_in("sk-guessed-CANARY-0099").status_code == 401
    assert approver.sign_in(APPROVER_KEY).status_code == 303
    run = held.start({"title": "refund 9"})
    denied = approver.post(
        _action(approver), {"csrf": approver.csrf(), "approve": "no", "reason": "not today"}
    )
    assert denied.status_code == 303
    line = json.loads(written.getvalue().splitlines()[-1])
    assert line["audit"]["what"] == "denied"
    assert line["request_id"] == denied.headers["x-request-id"]  # the request it was in
    run.join(timeout=30)
    second = held.start({"title": "refund 10"})
    approval_id = _action(approver).rsplit("/", 1)[1]
    decided = httpx.post(
        f"{held.base}/v1/toolgate/approvals/{approval_id}",
        json={"approve": True},
        headers={"authorization": f"Bearer {ADMIN_KEY}"},
        timeout=10,
    )
    assert decided.status_code == 200, decided.text
    second.join(timeout=30)
    assert approver.post("/console/sign-out", {"csrf": approver.csrf()}).status_code == 303
    assert admin.sign_in(ADMIN_KEY).status_code == 303
    # Started without a file here: the reload is refused, and that is audited too.
    assert admin.post("/console/configuration/reload", {"csrf": admin.csrf()}).status_code == 422
    assert admin.post("/console/configuration/check", {"csrf": admin.csrf()}).status_code == 200

    page = admin.client.get("/console/audit")
    assert page.status_code == 200
    rows = _rows(page.text)
    said = [(who, what, tenant) for _, who, what, tenant, _, _ in rows]
    assert said == [
        ("operator:admin", "probe", "—"),
        ("operator:admin", "reload refused", "—"),
        ("operator:admin", "sign-in", "—"),
        ("operator:alice", "sign-out", "—"),
        ("operator:admin", "approved", "acme"),
        ("operator:alice", "denied", "acme"),
        ("operator:alice", "sign-in", "—"),
        ("unknown key", "sign-in refused", "—"),
    ]
    denial = rows[5]
    assert re.fullmatch(r"create_ticket \(mcpr_[0-9a-f]+\): not today", denial[4])
    assert all(row[5] == "127.0.0.1" for row in rows)
    logged = [getattr(r, FIELDS)["audit"] for r in caplog.records if r.name == "toolgate.audit"]
    assert [(e["who"], e["what"]) for e in logged][::-1] == [(w, x) for w, x, _ in said]
    assert rows[1][4] == "this gateway was not started from a configuration file"
    for secret in (ADMIN_KEY, APPROVER_KEY, "sk-guessed-CANARY-0099"):
        assert secret not in page.text
        assert all(secret not in r.getMessage() for r in caplog.records)
    # The decided table names the approver too, and the audit is the admin key's.
    assert "operator:alice" in admin.client.get("/console/approvals").text
    assert approver.sign_in(APPROVER_KEY).status_code == 303
    assert approver.client.get("/console/audit").status_code == 404


def test_an_approver_key_may_not_take_the_admins_name() -> None:
    from pydantic import ValidationError

    from gateway.config import ApprovalsConfig

    with pytest.raises(ValidationError, match=r"server\.admin_key's name"):
        ApprovalsConfig.model_validate({"admin_keys": [{"name": "Admin", "key": "sk-x"}]})
    named = ApprovalsConfig.model_validate({"admin_keys": ["sk-a", {"name": "bob", "key": "sk-b"}]})
    assert [k.name for k in named.admin_keys] == [None, "bob"]
