"""Tenants: who an API key belongs to, and which models and tools it may use."""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import field

from gateway.config import (
    AssertedUsersConfig,
    BudgetConfig,
    GatewayConfig,
    HostedTools,
    JwtUsersConfig,
    LimitsConfig,
    PolicyConfig,
    Record,
    TenantConfig,
    ToolSearchConfig,
)
from gateway.errors import AuthError, NotFound
from gateway.policy.background import Background
from gateway.policy.rules import TenantPolicy
from tool_registry import immutable

DEFAULT_TENANT_ID = "default"


def key_digest(key: str) -> str:
    """How a tenant's API key is kept and compared: its SHA-256, in hex."""
    return hashlib.sha256(key.encode()).hexdigest()


@immutable
class Tenant:
    """A tenant with its allowlists resolved against the configuration."""

    id: str
    models: frozenset[str]
    tools: tuple[str, ...]  # in registry order
    limits: LimitsConfig
    hosted_tools: HostedTools = "drop"  # a client's hosted tool types (docs/design.md §11)
    policy: TenantPolicy = field(default_factory=TenantPolicy)  # effects, taint, approvals
    budget: BudgetConfig | None = None  # spend per day and month (docs/design.md §13)
    record: Record = "off"  # which of its requests are recorded for replay
    background: Background = field(default_factory=Background)  # get no server tools
    tool_search: ToolSearchConfig = field(default_factory=ToolSearchConfig)  # docs/design.md §17
    # How its end users are known (docs/design.md §18): verified, or asserted by its key.
    users: JwtUsersConfig | AssertedUsersConfig | None = None
    members: frozenset[str] = field(init=False, repr=False, compare=False)  # ``tools``, a set

    def __post_init__(self) -> None:
        object.__setattr__(self, "members", frozenset(self.tools))

    @property
    def searches(self) -> bool:
        """Whether some request of this tenant may have its tools searched: search is
        on, or automatic and the tenant may use more tools than it is off for."""
        search = self.tool_search
        return search.mode == "on" or (
            search.mode == "auto" and len(self.tools) > search.auto_above
        )

    @classmethod
    def resolve(
        cls,
        config: TenantConfig,
        models: Sequence[str],
        tools: Sequence[str],
        policy: PolicyConfig | None = None,
        record: Record = "off",
        tool_search: ToolSearchConfig | None = None,
    ) -> Tenant:
        return cls(
            id=config.id,
            models=frozenset(_matching(models, config.models)),
            tools=tuple(_matching(tools, config.tools)),
            limits=config.limits,
            hosted_tools=config.hosted_tools,
            policy=TenantPolicy.resolve(policy or PolicyConfig(), config.policy),
            budget=config.budget,
            record=config.record if config.record is not None else record,
            background=Background.of(config.background),
            tool_search=(tool_search or ToolSearchConfig()).under(config.tool_search),
            users=config.users.way if config.users is not None else None,
        )


def _matching(names: Sequence[str], patterns: list[str]) -> list[str]:
    return [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]


class TenantDirectory:
    """Finds the tenant of a request from its bearer key.

    Keys are kept only as SHA-256 digests. A presented key is hashed and compared with
    every configured digest in constant time, without stopping at a match, so the time
    taken says nothing about which key, if any, matched.
    """

    def __init__(self, config: GatewayConfig, tools: Sequence[str] | None = None) -> None:
        """``tools``: every tool name, in registry order (default: the inline tools)."""
        models = [m.name for m in config.models]
        if tools is None:
            tools = [t.name for t in config.tools]
        self._open: Tenant | None = None
        self._keys: list[tuple[bytes, Tenant]] = []
        if config.tenants is None:
            policy = TenantPolicy.resolve(config.policy, None)
            self._open = Tenant(
                DEFAULT_TENANT_ID,
                frozenset(models),
                tuple(tools),
                LimitsConfig(),
                policy=policy,
                record=config.recordings.record,
                tool_search=config.tool_search,
            )
        for tenant_config in config.tenants or []:
            tenant = Tenant.resolve(
                tenant_config,
                models,
                tools,
                config.policy,
                config.recordings.record,
                config.tool_search,
            )
            digests = [key_digest(k.get_secret_value()) for k in tenant_config.keys]
            for digest in [*digests, *tenant_config.key_sha256]:
                self._keys.append((bytes.fromhex(digest), tenant))

    def by_id(self, tenant_id: str) -> Tenant:
        """A tenant by its id (404 for none)."""
        found = self.find(tenant_id)
        if found is None:
            raise NotFound(f"No tenant {tenant_id!r} is configured.")
        return found

    def find(self, tenant_id: str) -> Tenant | None:
        """A tenant by its id, if one is configured."""
        return next((tenant for tenant in self.all() if tenant.id == tenant_id), None)

    def key_ids(self, tenant_id: str) -> list[str]:
        """How an operator tells a tenant's keys apart: each key's SHA-256 digest, its
        first 12 hex digits (never the key, and not enough of the digest to try keys
        against offline)."""
        return [f"sha256:{d.hex()[:12]}" for d, t in self._keys if t.id == tenant_id]

    def all(self) -> list[Tenant]:
        """Every tenant, once each."""
        if self._open is not None:
            return [self._open]
        return list({id(tenant): tenant for _, tenant in self._keys}.values())

    @property
    def open_mode(self) -> bool:
        return self._open is not None

    def authenticate(self, authorization: str | None) -> Tenant:
        """The tenant of an ``Authorization: Bearer <key>`` header; ``AuthError`` if none."""
        if self._open is not None:
            return self._open
        if not authorization:
            raise AuthError(
                "You didn't provide an API key. Send it as 'Authorization: Bearer <key>'."
            )
        scheme, _, key = authorization.partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key:
            raise AuthError("The Authorization header must be 'Bearer <key>'.")
        presented = hashlib.sha256(key.encode()).digest()
        found: Tenant | None = None
        for digest, tenant in self._keys:
            if hmac.compare_digest(digest, presented):
                found = tenant
        if found is None:
            raise AuthError("Incorrect API key provided.")
        return found
