from __future__ import annotations

import ipaddress
import socket

import httpx
import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from tests.support.fake_tools import FakeTools
from tests.support.servers import ServerThread
from tool_registry import (
    CallContext,
    EgressDenied,
    EgressPolicy,
    ToolExecutor,
    ToolRegistry,
    ToolSpec,
    create_tool_transport,
)
from tool_registry.egress import GuardedResolver, egress_denial


@pytest.mark.parametrize(
    ("policy", "host", "ip", "denied"),
    [
        (EgressPolicy(), "h", "169.254.169.254", True),
        (EgressPolicy(), "h", "::ffff:169.254.169.254", True),
        (EgressPolicy(), "h", "fd00:ec2::254", True),
        (EgressPolicy(), "h", "127.0.0.1", False),
        (EgressPolicy(), "h", "10.0.0.1", False),
        (EgressPolicy(deny_private=True), "h", "127.0.0.1", True),
        (EgressPolicy(deny_private=True), "h", "10.1.2.3", True),
        (EgressPolicy(deny_private=True), "h", "192.168.1.1", True),
        (EgressPolicy(deny_private=True), "h", "::1", True),
        (EgressPolicy(deny_private=True), "h", "93.184.216.34", False),
        (EgressPolicy(deny_private=True, allow_hosts=frozenset({"h"})), "h", "10.0.0.1", False),
        (
            EgressPolicy(deny_private=True, allow_hosts=frozenset({"h"})),
            "h",
            "169.254.169.254",
            True,
        ),
    ],
)
def test_policy(policy: EgressPolicy, host: str, ip: str, denied: bool) -> None:
    address = ipaddress.ip_address(ip)
    if denied:
        with pytest.raises(EgressDenied):
            policy.check(host, address)
    else:
        policy.check(host, address)


class FixedResolver(AbstractResolver):
    def __init__(self, address: str) -> None:
        self.address = address

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            ResolveResult(
                hostname=host, host=self.address, port=port, family=family, proto=0, flags=0
            )
        ]

    async def close(self) -> None:
        return None


@pytest.mark.anyio
async def test_names_resolving_to_metadata_are_refused_after_resolution() -> None:
    resolver = GuardedResolver(EgressPolicy(), FixedResolver("169.254.169.254"))
    with pytest.raises(EgressDenied, match="metadata"):
        await resolver.resolve("innocent.example", 80)
    fine = GuardedResolver(EgressPolicy(), FixedResolver("93.184.216.34"))
    assert (await fine.resolve("innocent.example", 80))[0]["host"] == "93.184.216.34"


def test_egress_denial_is_found_in_the_chain() -> None:
    inner = EgressDenied("no")
    outer = httpx.ConnectError("wrapped")
    outer.__cause__ = inner
    assert egress_denial(outer) is inner
    assert egress_denial(ValueError("x")) is None


@pytest.mark.anyio
@pytest.mark.parametrize(("allow", "outcome", "hits"), [(False, "denied", 0), (True, "ok", 1)])
async def test_the_real_client_refuses_private_names(allow: bool, outcome: str, hits: int) -> None:
    """Through aiohttp and its resolver: ``localhost`` is private when deny_private is on."""
    tools = FakeTools()
    with ServerThread(tools.app()) as server:
        spec = ToolSpec.model_validate(
            {
                "name": "len",
                "parameters": {"type": "object", "properties": {"s": {"type": "string"}}},
                "http": {"url": f"http://localhost:{server.port}/len"},
            }
        )
        allowed = frozenset({"localhost"}) if allow else frozenset()
        policy = EgressPolicy(True, allowed)
        async with create_tool_transport(policy) as transport:
            call = ToolRegistry([spec]).get("len").prepare('{"s": "abc"}', CallContext("t"))  # type: ignore[union-attr]
            result = await ToolExecutor(transport, policy).execute(call)
    assert result.outcome == outcome
    assert len(tools.hits) == hits


@pytest.mark.anyio
async def test_a_refused_connection_is_not_a_timeout() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again before the call: nothing listens
    spec = ToolSpec.model_validate({"name": "gone", "http": {"url": f"http://127.0.0.1:{port}/"}})
    async with create_tool_transport(EgressPolicy()) as transport:
        call = ToolRegistry([spec]).get("gone").prepare("{}", CallContext("t"))  # type: ignore[union-attr]
        result = await ToolExecutor(transport).execute(call)
    assert result.outcome == "http_error"
    assert "could not be reached" in result.content
