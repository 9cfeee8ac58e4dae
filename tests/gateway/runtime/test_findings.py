"""What ``toolgate check`` warns of beyond what fails a load (issue 52 §7, §9): a console
no key can sign in to, and a tenant whose tools act as a user it never names."""

from __future__ import annotations

import base64
from typing import Any

from gateway.config import GatewayConfig
from gateway.runtime.health import findings
from gateway.runtime.snapshot import Runtime
from gateway.runtime.tool_sources import static_tools


def checked(data: dict[str, Any]) -> list[str]:
    config = GatewayConfig.model_validate(data)
    return findings(config, Runtime.build(config, static_tools(config).tools))


def base(**more: Any) -> dict[str, Any]:
    return {
        "upstreams": [{"name": "up", "base_url": "http://127.0.0.1:9/v1"}],
        "models": [{"name": "m", "upstream": "up"}],
        "tools": [
            {"name": "plain", "http": {"url": "http://127.0.0.1:9/plain"}},
            {
                "name": "mine",
                "http": {"url": "http://127.0.0.1:9/mine"},
                "auth": {"connection": "svc"},
            },
        ],
        "server": {"public_url": "https://gw.example"},
        "grants": {"keys": [{"id": "k1", "key": base64.b64encode(b"k" * 32).decode()}]},
        "connections": [
            {
                "name": "svc",
                "type": "oauth2",
                "authorize_url": "https://idp.example/authorize",
                "token_url": "https://idp.example/token",
                "client_id": "c",
            }
        ],
        **more,
    }


def test_a_tenant_with_a_tool_acting_as_a_user_it_never_names_is_warned_of() -> None:
    users = {"jwt": {"issuer": "https://idp.example", "audience": "a"}}
    data = base(
        tenants=[
            {"id": "acme", "keys": ["sk-a-x1234"], "tools": ["plain", "mine"]},
            {"id": "beta", "keys": ["sk-b-x1234"], "tools": ["mine"], "users": users},
            {"id": "gamma", "keys": ["sk-c-x1234"], "tools": ["plain"]},
        ]
    )
    found = [f for f in checked(data) if "act as the user" in f]
    assert len(found) == 1
    assert found[0].startswith("tenant 'acme': its tools mine act as the user")
    assert "tenants[].users" in found[0]


def test_a_console_no_key_can_sign_in_to_is_warned_of() -> None:
    data = base(console={"enabled": True})
    assert any("no key can sign in" in f for f in checked(data))
    approver = {"approvals": {"admin_keys": ["sk-approver-x1234"]}}
    data["tenants"] = [{"id": "a", "keys": ["sk-a-x1234"], "policy": approver}]
    assert not any("no key can sign in" in f for f in checked(data))
