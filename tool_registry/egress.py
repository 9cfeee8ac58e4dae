"""The egress guard: which addresses tool calls may reach.

Checked on the resolved address, so a name that resolves to a metadata service is
refused as surely as the literal address: ``GuardedResolver`` wraps aiohttp's
resolver, and ``EgressPolicy.check_url`` covers literal IP hosts, which aiohttp does
not resolve.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field
from typing import Any

import httpx
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from .errors import EgressDenied

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Cloud instance-metadata services; refused whatever the configuration says.
_METADATA_NETWORKS = tuple(
    ipaddress.ip_network(n)
    for n in (
        "169.254.0.0/16",  # link-local: AWS, GCP, Azure, ECS task metadata, …
        "fd00:ec2::254/128",  # AWS over IPv6
        "fe80::/10",  # IPv6 link-local
        "100.100.100.200/32",  # Alibaba Cloud
        "192.0.0.192/32",  # Oracle Cloud
    )
)


def _unmap(ip: IPAddress) -> IPAddress:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def is_metadata_address(ip: IPAddress) -> bool:
    ip = _unmap(ip)
    return any(ip.version == n.version and ip in n for n in _METADATA_NETWORKS)


def is_private_address(ip: IPAddress) -> bool:
    """Loopback, private, link-local, unspecified or otherwise not globally routable."""
    ip = _unmap(ip)
    return not ip.is_global or ip.is_loopback or ip.is_private


def literal_ip(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


_VERDICTS_KEPT = 1024


@dataclass(frozen=True)
class EgressPolicy:
    """``deny_private`` also refuses loopback and private ranges, except for ``allow_hosts``."""

    deny_private: bool = False
    allow_hosts: frozenset[str] = field(default_factory=frozenset)
    # Literal hosts already judged (None: allowed): tools call the same few hosts.
    _verdicts: dict[str, str | None] = field(
        default_factory=dict, init=False, compare=False, hash=False, repr=False
    )

    def check(self, host: str, ip: IPAddress) -> None:
        """Raise ``EgressDenied`` if ``host`` may not be reached at ``ip``."""
        if is_metadata_address(ip):
            raise EgressDenied(f"{host}: address {ip} is a cloud metadata address")
        if self.deny_private and host.lower() not in self.allow_hosts and is_private_address(ip):
            raise EgressDenied(f"{host}: address {ip} is in a private range")

    def check_url(self, url: httpx.URL) -> None:
        """Check a URL whose host is a literal address; names are checked when resolved."""
        host = url.host
        try:
            verdict = self._verdicts[host]
        except KeyError:
            verdict = self._judge(host)
            if len(self._verdicts) >= _VERDICTS_KEPT:
                self._verdicts.clear()
            self._verdicts[host] = verdict
        if verdict is not None:
            raise EgressDenied(verdict)

    def _judge(self, host: str) -> str | None:
        ip = literal_ip(host)
        if ip is None:
            return None
        try:
            self.check(host, ip)
        except EgressDenied as exc:
            return str(exc)
        return None


class GuardedResolver(AbstractResolver):
    """An aiohttp resolver that refuses hosts whose addresses the policy refuses."""

    def __init__(self, policy: EgressPolicy, inner: AbstractResolver | None = None) -> None:
        self._policy = policy
        self._inner = inner or DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        for result in results:
            self._policy.check(host, ipaddress.ip_address(result["host"]))
        return results

    async def close(self) -> None:
        await self._inner.close()


def egress_denial(exc: BaseException) -> EgressDenied | None:
    """The ``EgressDenied`` somewhere in an exception's chain, if any."""
    seen: set[int] = set()
    current: Any = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, EgressDenied):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
