from __future__ import annotations

import hashlib
from typing import Any

import pytest

from gateway.config import GatewayConfig
from gateway.errors import AuthError
from gateway.policy.tenants import TenantDirectory

BASE: dict[str, Any] = {
    "upstreams": [{"name": "u", "base_url": "http://127.0.0.1:1/v1"}],
    "models": [{"name": "gpt-a", "upstream": "u"}, {"name": "llama", "upstream": "u"}],
    "tools": [
        {"name": "pets_get", "http": {"url": "http://x.example/"}},
        {"name": "pets_list", "http": {"url": "http://x.example/"}},
        {"name": "admin", "http": {"url": "http://x.example/"}},
    ],
}


def directory(tenants: list[dict[str, Any]] | None) -> TenantDirectory:
    return TenantDirectory(GatewayConfig.model_validate({**BASE, "tenants": tenants}))


def test_keys_and_digests_find_their_tenant() -> None:
    tenants = directory(
        [
            {"id": "acme", "keys": ["k-acme"], "models": ["gpt-*"], "tools": ["pets_*"]},
            {"id": "beta", "key_sha256": [hashlib.sha256(b"k-beta").hexdigest()]},
        ]
    )
    acme = tenants.authenticate("Bearer k-acme")
    assert acme.id == "acme"
    assert acme.models == frozenset({"gpt-a"})
    assert acme.tools == ("pets_get", "pets_list")
    beta = tenants.authenticate("bearer  k-beta ")
    assert (beta.id, beta.tools) == ("beta", ())
    assert not tenants.open_mode


@pytest.mark.parametrize(
    "header", [None, "", "Bearer", "Bearer ", "Basic k-acme", "Bearer k-acme2", "k-acme"]
)
def test_anything_else_is_refused(header: str | None) -> None:
    with pytest.raises(AuthError):
        directory([{"id": "acme", "keys": ["k-acme"]}]).authenticate(header)


def test_open_mode_has_one_tenant_with_everything() -> None:
    tenants = directory(None)
    tenant = tenants.authenticate(None)
    assert tenants.open_mode
    assert tenant.id == "default"
    assert tenant.tools == ("pets_get", "pets_list", "admin")
    assert tenant.models == frozenset({"gpt-a", "llama"})
