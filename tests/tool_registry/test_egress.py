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
    HttpTool,
    ToolExecutor,
    ToolSpec,
    create_tool_transport,
)
from tool_registry.egress import GuardedResolver, egress_denial, is_loose_ipv4


@pytest.mark.parametrize(
    ("policy", "host", "ip", "denied"),
    [
        (EgressPolicy(), "h", "169.254.169.254", True),
        (EgressPolicy(), "h", "::ffff:169.254.169.254", True),
        (EgressPolicy(), "h", "fd00:ec2::254", True),
        # IPv6 forms that embed an IPv4 address: compatible, mapped, NAT64, 6to4, Teredo
        (EgressPolicy(), "h", "::169.254.169.254", True),
        (EgressPolicy(), "h", "64:ff9b::a9fe:a9fe", True),
        (EgressPolicy(), "h", "64:ff9b:1::a9fe:a9fe", True),
        (EgressPolicy(), "h", "2002:a9fe:a9fe::", True),
        (EgressPolicy(), "h", "2001:0:4136:e378:8000:63bf:5601:5601", True),  # Teredo
        (EgressPolicy(deny_private=True), "h", "::127.0.0.3", True),
        (EgressPolicy(deny_private=True), "h", "64:ff9b::a00:5", True),
        (EgressPolicy(deny_private=True), "h", "::ffff:10.0.0.5", True),
        (EgressPolicy(deny_private=True), "h", "2002:c0a8:101::1", True),
        (EgressPolicy(deny_private=True), "h", "64:ff9b::5db8:d822", False),  # a public v4
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


@pytest.mark.parametrize(
    ("host", "loose"),
    [
        ("2852039166", True),
        ("0xa9fea9fe", True),
        ("0251.0376.0251.0376", True),
        ("169.254.43518", True),
        ("169.254.169.254.", True),
        ("0177.1", True),
        ("127.000.000.001", True),
        ("169.254.169.254", False),
        ("example.com", False),
        ("1.example", False),
        ("::1", False),
    ],
)
def test_loose_ipv4_forms_are_recognised(host: str, loose: bool) -> None:
    assert is_loose_ipv4(host) is loose


@pytest.mark.parametrize(
    "url",
    [
        "http://2852039166/",
        "http://0xa9fea9fe/",
        "http://0177.1/",
        "http://[::169.254.169.254]/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://[2002:a9fe:a9fe::]/",
    ],
)
def test_check_url_refuses_before_any_connection(url: str) -> None:
    with pytest.raises(EgressDenied):
        EgressPolicy().check_url(httpx.URL(url))


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
            call = HttpTool(spec).prepare('{"s": "abc"}', CallContext("t"))
            result = await ToolExecutor(transport).execute(call)
    assert result.outcome == outcome
    assert len(tools.hits) == hits


@pytest.mark.anyio
async def test_a_refused_connection_is_not_a_timeout() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again before the call: nothing listens
    spec = ToolSpec.model_validate({"name": "gone", "http": {"url": f"http://127.0.0.1:{port}/"}})
    async with create_tool_transport(EgressPolicy()) as transport:
        call = HttpTool(spec).prepare("{}", CallContext("t"))
        result = await ToolExecutor(transport).execute(call)
    assert result.outcome == "http_error"
    assert "could not be reached" in result.content
