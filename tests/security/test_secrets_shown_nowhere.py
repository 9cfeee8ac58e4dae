"""Secrets in URLs and in providers' answers are secrets everywhere (issue 47 §2).

An OpenAPI source whose document URL carries a password and a key
(``http://u:PASS@host/doc.json?key=KEY``) is shown by one label made without them: to the
model (the search function's description names sources), to operators (the tools route,
the console), in the start-up log line and in spans. A token endpoint that quotes the
gateway's client secret in its error has it redacted on the connect page and in the log,
as every configured secret is (``secrets_of``: one list every sink reads)."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest

from gateway import GatewayConfig
from gateway.ops.logs import JsonFormatter
from gateway.ops.redaction import redactor_of
from tests.e2e.test_connect_e2e import SECRET, Stack
from tests.e2e.test_console_e2e import Operator
from tests.support.otlp import OtlpReceiver
from tests.support.recorder import Answer, Received, Recorder
from tests.support.scripted import MODEL, TENANT_KEY, Harness, Model, asks, call, config, says

PASSWORD = "doc-password-CANARY-0047"
DOC_KEY = "doc-key-CANARY-0048"
ADMIN = "sk-admin-CANARY-0049"
DOCUMENT = {
    "openapi": "3.0.3",
    "info": {"title": "Pets", "version": "1"},
    "paths": {
        "/pets/{id}": {
            "get": {
                "operationId": "getPet",
                "summary": "Find a pet by its id.",
                "parameters": [
                    {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
            }
        }
    },
}


def _document(hit: Received) -> Answer:
    if hit.raw_path.startswith("/doc.json"):
        return Answer(body=json.dumps(DOCUMENT).encode())
    return Answer(body=b'{"name": "Rex"}')


def test_a_document_urls_secrets_reach_no_model_operator_log_or_span(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    documents = Recorder(_document)
    host = harness.serve(documents).url.removeprefix("http://")
    spec = f"http://pets:{PASSWORD}@{host}/doc.json?key={DOC_KEY}"
    collector = OtlpReceiver()
    collector_url = harness.serve(collector).url
    model = Model(asks(call("pets_getPet", {"id": "7"})), says("It is Rex."))
    data = config(harness.serve(model.recorder).url, [])
    data |= {
        "openapi": [{"spec": spec, "prefix": "pets_", "base_url": f"http://{host}"}],
        "server": {"admin_key": ADMIN},
        "console": {"enabled": True},
        "otel": {"endpoint": collector_url},
    }
    data["tenants"][0] |= {"tools": ["*"], "tool_search": {"mode": "on"}}
    gateway = harness.gateway(data, environ={"OTEL_BSP_SCHEDULE_DELAY": "50"})
    assert documents.hits[0].headers["authorization"].startswith("Basic ")  # it was used
    assert DOC_KEY in documents.hits[0].raw_path

    answer = harness.client(gateway).post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "pet 7?"}]},
    )
    assert answer.status_code == 200, answer.text
    admin = {"authorization": f"Bearer {ADMIN}"}
    tools = httpx.get(f"{gateway.url}/v1/toolgate/tools?tenant=acme", headers=admin)
    assert tools.status_code == 200, tools.text
    assert any("[redacted]" in row["source"] for row in tools.json()["sources"]), tools.text
    operator = Operator(harness, gateway.url)
    assert operator.sign_in(ADMIN).status_code == 303
    page = operator.client.get("/console/tools?tenant=acme")
    assert page.status_code == 200
    assert "pets_getPet" in page.text
    collector.tool_span_of(answer.headers["x-toolgate-trace-id"])
    seen = {
        "the model's requests": json.dumps(model.requests),
        "the tools route": tools.text,
        "the console": page.text,
        "the log": caplog.text,
        "spans": json.dumps([[s.name, s.attributes] for s in collector.spans]),
    }
    assert "openapi:http://[redacted]@" in seen["the model's requests"]  # sources named
    assert "tool source openapi http://[redacted]@" in seen["the log"]
    for where, text in seen.items():
        for secret in (PASSWORD, DOC_KEY):
            assert secret not in text, f"{secret} in {where}"


class QuotedStack(Stack):
    """A token endpoint whose error quotes the gateway's client secret."""

    def __init__(self, harness: Harness) -> None:
        super().__init__(harness)
        provider = self.oauth.recorder.respond

        def quoting(hit: Received) -> Answer:
            if hit.raw_path == "/token":
                return Answer(400, json.dumps({"error": SECRET}).encode())
            return provider(hit)

        self.oauth.recorder.respond = quoting

    def _data(self, data: dict[str, Any]) -> dict[str, Any]:
        self.config = GatewayConfig.model_validate(data)
        return data


def test_a_provider_quoting_the_client_secret_has_it_redacted_on_the_page_and_in_the_log(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    stack = QuotedStack(harness)
    page = stack.browse(stack.link())
    assert page.status_code == 502
    assert "the provider refused ([redacted])" in page.text
    assert SECRET not in page.text
    formatter = JsonFormatter(redactor_of(stack.config))
    written = "\n".join(formatter.format(r) for r in caplog.records if r.name.startswith("gateway"))
    assert "not made" in written  # the gateway's line was read
    assert SECRET not in written
    assert TENANT_KEY not in written
