from __future__ import annotations

import pytest

from gateway.cli.main import is_loopback, open_mode_refusal
from gateway.config import GatewayConfig

BASE = {
    "upstreams": [{"name": "u", "base_url": "http://127.0.0.1:1/v1"}],
    "models": [{"name": "m", "upstream": "u"}],
}


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.9.9.9", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.1", False),
        ("example.com", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize(
    ("extra", "host", "refused"),
    [
        ({}, "127.0.0.1", False),
        ({}, "0.0.0.0", True),
        ({"server": {"allow_open": True}}, "0.0.0.0", False),
        ({"tenants": [{"id": "a", "keys": ["k"]}]}, "0.0.0.0", False),
    ],
)
def test_open_mode_stays_on_loopback(extra: dict[str, object], host: str, refused: bool) -> None:
    config = GatewayConfig.model_validate({**BASE, **extra})
    assert (open_mode_refusal(config, host) is not None) is refused
