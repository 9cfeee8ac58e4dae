"""HTTP for MCP servers under the egress policy.

The official ``mcp`` SDK speaks HTTP through ``httpx2``. Its client here connects
through ``GuardedBackend``, which resolves the host itself, judges every address with
the same ``EgressPolicy`` as HTTP tools, and connects to an address it judged: a name
that resolves to a metadata service or (with ``deny_private``) a private range is
refused before any byte is sent, and DNS cannot change its answer in between. TLS
still verifies the certificate against the host name.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from typing import Any

import httpcore2
import httpx2
from httpcore2 import AsyncNetworkBackend, AsyncNetworkStream

from tool_registry.egress import EgressPolicy, is_loose_ipv4
from tool_registry.errors import EgressDenied


class GuardedBackend(AsyncNetworkBackend):
    """A network backend that connects only where the egress policy allows."""

    def __init__(self, policy: EgressPolicy, inner: AsyncNetworkBackend | None = None) -> None:
        self._policy = policy
        self._inner = inner or httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore2 calls it so)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> AsyncNetworkStream:
        if is_loose_ipv4(host):
            raise EgressDenied(f"{host}: an IPv4 address must be written as a dotted quad")
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, TimeoutError) as exc:
            raise httpcore2.ConnectError(f"{host}: cannot be resolved") from exc
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        for address in addresses:
            self._policy.check(host, ipaddress.ip_address(address.split("%")[0]))
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                failure = exc
        raise failure or httpcore2.ConnectError(f"{host}: no address")

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109
        socket_options: Iterable[Any] | None = None,
    ) -> AsyncNetworkStream:
        raise EgressDenied("unix sockets are not a destination")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _GuardedTransport(httpx2.AsyncHTTPTransport):
    def __init__(self, policy: EgressPolicy) -> None:
        super().__init__(trust_env=False)
        limits = httpx2.Limits(max_connections=20, max_keepalive_connections=10)
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=httpx2.create_ssl_context(trust_env=False),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=GuardedBackend(policy),
        )


def guarded_client(
    policy: EgressPolicy,
    headers: dict[str, str],
    timeout_s: float,
    statuses: list[int] | None = None,
) -> httpx2.AsyncClient:
    """An ``httpx2`` client for one MCP server: its headers, its timeout, the policy;
    every response's status noted in ``statuses`` where given (the SDK does not say
    which status a refused request had)."""

    async def note(response: httpx2.Response) -> None:
        if statuses is not None and len(statuses) < 64:
            statuses.append(response.status_code)

    return httpx2.AsyncClient(
        transport=_GuardedTransport(policy),
        headers=headers,
        timeout=httpx2.Timeout(timeout_s, read=max(timeout_s, 300.0)),
        trust_env=False,
        follow_redirects=False,
        event_hooks={"response": [note]} if statuses is not None else None,
    )
