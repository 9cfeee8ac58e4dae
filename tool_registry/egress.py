"""The egress guard: which addresses tool calls may reach.

Checked on the resolved address, so a name that resolves to a metadata service is
refused as surely as the literal address: ``GuardedResolver`` wraps aiohttp's
resolver, and ``EgressPolicy.check_url`` covers literal IP hosts, which aiohttp does
not resolve. An IPv6 address is judged with every IPv4 address it embeds (mapped,
compatible, NAT64, 6to4, Teredo); IPv4 spellings other than the dotted quad
(``0xa9fea9fe``, ``2852039166``, octal parts) are refused, whatever resolves them.
"""

from __future__ import annotations

import ipaddress
import re
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


_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_COMPATIBLE = ipaddress.ip_network("::/96")  # IPv4-compatible (deprecated, still routed)


def embedded_ipv4(ip: IPAddress) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries: mapped (``::ffff:a.b.c.d``),
    compatible (``::a.b.c.d``), NAT64 (``64:ff9b::a.b.c.d``), 6to4 (``2002:AABB:CCDD::``)
    and Teredo (its client and server). A stack or a translator on the way may deliver
    a packet for one of these to the IPv4 address inside."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return []
    found: list[ipaddress.IPv4Address] = []
    if ip.ipv4_mapped is not None:
        found.append(ip.ipv4_mapped)
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found.extend(ip.teredo)
    low32 = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if any(ip in network for network in _NAT64):
        found.append(low32)
    if ip in _COMPATIBLE and int(ip) > 1:  # not :: or ::1
        found.append(low32)
    return found


def _forms(ip: IPAddress) -> list[IPAddress]:
    return [ip, *embedded_ipv4(ip)]


def is_metadata_address(ip: IPAddress) -> bool:
    return any(a.version == n.version and a in n for a in _forms(ip) for n in _METADATA_NETWORKS)


def is_private_address(ip: IPAddress) -> bool:
    """Loopback, private, link-local, unspecified or otherwise not globally routable,
    itself or in the IPv4 address it embeds."""
    return any(not a.is_global or a.is_loopback or a.is_private for a in _forms(ip))


def literal_ip(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


_LOOSE_IPV4_PART = re.compile(r"^(0[xX][0-9a-fA-F]*|[0-9]+)$")


def is_loose_ipv4(host: str) -> bool:
    """A host that ``inet_aton`` (and so ``getaddrinfo``) reads as an IPv4 address but
    that is not the canonical dotted quad: ``2852039166``, ``0xa9fea9fe``,
    ``0251.0376.0251.0376``, ``169.254.43518``, a trailing dot. Refused outright: a
    URL parser and a resolver may disagree about what it names."""
    text = host.rstrip(".") if host.endswith(".") else host
    parts = text.split(".")
    if not 1 <= len(parts) <= 4 or not all(_LOOSE_IPV4_PART.match(p) for p in parts):
        return False
    try:
        canonical = ipaddress.IPv4Address(host)
    except ValueError:
        return True
    return str(canonical) != host


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
        if is_loose_ipv4(host):
            return f"{host}: an IPv4 address must be written as a dotted quad"
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


def failure_words(exc: BaseException) -> str:
    """What went wrong on the way out, in a few words for a log line or a message: the
    guard's refusal where it is anywhere in the chain (a transport's network error is
    often its wrapper), else the error's kind."""
    denial = egress_denial(exc)
    if denial is not None:
        return f"refused by the egress policy: {denial}"
    return type(exc).__name__
