"""The example configuration (``config/gateway.yaml`` and its tool files) against the
example tools (``toolgate example-tools``): every example tool answers through the
gateway as the README says, the CRM's tenant bound by the gateway."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import httpx
import openai

from gateway import create_app, load_config
from gateway.cli.example_tools import create_example_tools_app
from tests.support.scripted import Harness, Model, asks, call, says

ROOT = Path(__file__).resolve().parents[2]


def seed(body: dict[str, Any]) -> dict[str, Any]:
    """sqrt(len("hello") + len("world")), then a customer lookup, then the answer."""
    results = {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}
    if not results:
        return asks(
            call("string_length", {"s": "hello"}, "l1"), call("string_length", {"s": "world"}, "l2")
        )
    if "a" not in results:
        return asks(call("add", {"a": results["l1"], "b": results["l2"]}, "a"))
    if "r" not in results:
        return asks(call("sqrt", {"x": results["a"]}, "r"))
    if "c" not in results:
        return asks(call("crm_lookup", {"customer": "ada@example.com", "tenant": "acme"}, "c"))
    customer = json.loads(results["c"])
    return says(f"{float(results['r']):.3f} for {customer['name']} of {customer['tenant']}")


def test_every_example_tool_answers_through_the_example_config(harness: Harness) -> None:
    tools = harness.serve(create_example_tools_app())
    model = Model(seed)
    upstream = harness.serve(model.recorder)
    env = {"UPSTREAM_BASE_URL": f"{upstream.url}/v1", "TOOLS_BASE_URL": tools.url}
    config = load_config(ROOT / "config" / "gateway.yaml", env=env)
    gateway = harness.serve(create_app(config))
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused")
    harness.on_close(client.close)
    answer = client.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "go"}],
        extra_headers={"x-toolgate-user": "u-1"},
    )
    assert answer.choices[0].message.content == f"{math.sqrt(10):.3f} for Ada Lovelace of default"


def test_the_example_tools_refuse_bad_input_as_a_service_would(harness: Harness) -> None:
    url = harness.serve(create_example_tools_app()).url
    assert httpx.get(f"{url}/len", params={"s": "héllo"}).json() == {"length": 5}
    assert httpx.post(f"{url}/add", json={"a": 0.5, "b": 2}).json() == {"sum": 2.5}
    assert httpx.get(f"{url}/sqrt", params={"x": "16"}).json() == {"sqrt": 4.0}
    assert httpx.get(f"{url}/sqrt", params={"x": "-1"}).status_code == 400
    assert httpx.get(f"{url}/sqrt", params={"x": "nan"}).status_code == 400
    assert httpx.post(f"{url}/add", content=b"{").status_code == 400
    assert httpx.post(f"{url}/add", json={"a": True, "b": 1}).status_code == 400
    assert httpx.get(f"{url}/len").status_code == 400
    other = httpx.get(f"{url}/crm/acme/customers/ada@example.com")
    assert other.status_code == 404  # Ada is the default tenant's customer, not acme's
    own = httpx.get(
        f"{url}/crm/acme/customers/wile@acme.example", headers={"x-acting-user": "u-9"}
    ).json()
    assert own["looked_up_by"] == "u-9"
