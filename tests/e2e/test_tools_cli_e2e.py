"""``toolgate tools list|show|call`` against a real tool server on loopback: what a
tenant's model sees, and one call made as the loop makes it (bind, egress, shaping)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.cli.main import main
from tests.support.recorder import Answer, Recorder
from tests.support.scripted import Harness


def write_config(path: Path, tools_url: str) -> str:
    data: dict[str, Any] = {
        "upstreams": [{"name": "u", "base_url": "http://127.0.0.1:1/v1"}],
        "models": [{"name": "m", "upstream": "u"}],
        "egress": {"deny_private": False},
        "tools": [
            {
                "name": "lookup",
                "description": "Looks a customer up.",
                "parameters": {
                    "type": "object",
                    "properties": {"id": {"type": "string"}, "tenant": {"type": "string"}},
                },
                "bind": {"tenant": "{tenant.id}", "user": "{header.x-user}"},
                "http": {"url": f"{tools_url}/customers/{{id}}", "headers": {"x-user": "{user}"}},
                "result": {"pick": "name"},
            },
            {"name": "other", "http": {"url": f"{tools_url}/other"}},
        ],
        "policy": {
            "tools": [
                {"tools": ["other"], "output": "untrusted"},
                {"tools": ["refund_*"], "approval": "always"},  # names no tool
            ]
        },
        "tenants": [
            {
                "id": "acme",
                "keys": ["k-acme"],
                "tools": ["lookup"],
                "policy": {"tools": [{"tools": ["lookup"], "approval": "after_untrusted"}]},
                "budget": {"cost_usd_per_day": 5},  # and its model has no price
            },
            {
                "id": "beta",
                "keys": ["k-beta"],
                "tools": ["other"],
                # A tenant tightens, never loosens: "other" stays untrusted.
                "policy": {
                    "tools": [{"tools": ["other"], "output": "trusted", "effects": "write"}]
                },
            },
        ],
    }
    file = path / "gateway.yaml"
    file.write_text(yaml.safe_dump(data))
    return str(file)


def test_list_show_and_call_a_tenants_tool(
    harness: Harness, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tools = Recorder(lambda hit: Answer(body=b'{"name": "Ada", "secret": "s"}'))
    config = write_config(tmp_path, harness.serve(tools).url)

    assert main(["tools", "list", "--config", config, "--tenant", "acme"]) == 0
    listed = "lookup\thttp\tread\ttrusted\tafter_untrusted\tLooks a customer up.\n"
    assert capsys.readouterr().out == listed
    assert main(["tools", "list", "--config", config, "--tenant", "beta"]) == 0
    assert capsys.readouterr().out == "other\thttp\twrite\tuntrusted\tnever\t\n"
    assert main(["check", "--config", config]) == 0
    checked = capsys.readouterr().out
    assert "warning: policy.tools[1] (refund_*) matches no tool\n" in checked
    unpriced = "warning: tenant 'acme' has a cost limit, but 'm' has no price"
    assert unpriced in checked
    assert "tenant 'beta'" not in checked

    assert main(["tools", "show", "lookup", "--config", config, "--tenant", "acme"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert set(shown["function"]["parameters"]["properties"]) == {"id"}  # bound ones hidden

    code = main(
        [
            "tools",
            "call",
            "lookup",
            "--config",
            config,
            "--tenant",
            "acme",
            "--args",
            '{"id": "c/1", "tenant": "beta"}',
            "--header",
            "X-User: u7",
        ]
    )
    assert code == 0
    assert json.loads(capsys.readouterr().out) == {
        "outcome": "ok",
        "status": 200,
        "content": '"Ada"',
    }
    [hit] = tools.hits
    assert hit.raw_path == "/customers/c%2F1?tenant=acme"  # bound, whatever the model said
    assert hit.headers["x-user"] == "u7"


def test_a_tenant_cannot_reach_another_tenants_tool(
    harness: Harness, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tools = Recorder()
    config = write_config(tmp_path, harness.serve(tools).url)
    assert main(["tools", "call", "lookup", "--config", config, "--tenant", "beta"]) == 2
    assert "has no tool 'lookup'" in capsys.readouterr().err
    assert main(["tools", "list", "--config", config]) == 2  # which tenant?
    assert tools.hits == []
