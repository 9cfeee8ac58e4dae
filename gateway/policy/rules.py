"""What each tool is, and who approves its calls, for one tenant (docs/design.md §13).

A tool's source says what it does (``Tool.effects``, ``Tool.output``: the HTTP method,
the OpenAPI operation, the MCP server's hints); the gateway's ``policy.tools`` rules
say otherwise where the operator knows better (and what a call costs), later rules
winning; then the
tenant's own rules and settings, which only tighten (a tool read as ``write`` stays
``write``, an approval asked stays asked). ``TenantPolicy`` is that, resolved once per
runtime snapshot and tenant, and each tool's answer is worked out once.
"""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from gateway.config import (
    AfterUntrusted,
    Approval,
    ApprovalsConfig,
    GuardrailConfig,
    GuardrailOn,
    GuardrailsConfig,
    PolicyConfig,
    TenantPolicyConfig,
    ToolRule,
)
from tool_registry import Effects, Tool, Trust, canonical, immutable

# Each setting's values, loosest first: a tenant may move right, never left.
_EFFECTS: tuple[Effects, ...] = ("read", "write")
_TRUST: tuple[Trust, ...] = ("trusted", "untrusted")
_APPROVAL: tuple[Approval, ...] = ("never", "after_untrusted", "always")
_AFTER_UNTRUSTED: tuple[AfterUntrusted, ...] = ("allow", "approve", "refuse")

V = TypeVar("V", bound=str)

CLIENT_SOURCE = "client"  # the source label of a client's own tools, for guardrails


def tighter(order: tuple[V, ...], first: V, second: V | None) -> V:
    """The stricter of two settings (``second`` may be unset)."""
    if second is None:
        return first
    return max(first, second, key=order.index)


@immutable
class ToolPolicy:
    """What one tool is, for one tenant, and who approves its calls."""

    effects: Effects
    output: Trust
    approval: Approval
    version: str  # a digest of all that decides its calls, for approvals to bind to
    cost_usd: float = 0.0  # what one call costs the tenant's budgets
    guardrails: tuple[GuardrailConfig, ...] = ()  # its results' (docs/guardrails.md)


def matches(rule: ToolRule | GuardrailConfig, tool: Tool) -> bool:
    """Whether ``rule`` is about ``tool`` (its name and its source's label)."""
    if not fnmatch.fnmatchcase(tool.label, rule.source):
        return False
    return any(fnmatch.fnmatchcase(tool.name, pattern) for pattern in rule.tools)


@dataclass(slots=True, eq=False)
class TenantPolicy:
    """The gateway's policy with one tenant's tightenings, and each tool's answer."""

    gateway_rules: tuple[ToolRule, ...] = ()
    tenant_rules: tuple[ToolRule, ...] = ()
    input: Trust = "trusted"
    after_untrusted: AfterUntrusted = "allow"
    approvals: ApprovalsConfig = field(default_factory=ApprovalsConfig)
    # The gateway's guardrails and the tenant's, and how a streamed answer is screened.
    guarding: GuardrailsConfig = field(default_factory=GuardrailsConfig)
    _tools: dict[int, tuple[Tool, ToolPolicy]] = field(default_factory=dict, repr=False)

    @classmethod
    def resolve(cls, gateway: PolicyConfig, tenant: TenantPolicyConfig | None) -> TenantPolicy:
        if tenant is None:
            return cls(
                tuple(gateway.tools),
                (),
                gateway.input,
                gateway.after_untrusted,
                gateway.approvals,
                gateway.guardrails,
            )
        return cls(
            tuple(gateway.tools),
            tuple(tenant.tools),
            tighter(_TRUST, gateway.input, tenant.input),
            tighter(_AFTER_UNTRUSTED, gateway.after_untrusted, tenant.after_untrusted),
            tenant.approvals or gateway.approvals,
            guarding_of(gateway.guardrails, tenant.guardrails),
        )

    def guardrails(self, on: GuardrailOn) -> tuple[GuardrailConfig, ...]:
        """The guardrails on the model's final answers or the client's input."""
        return tuple(rule for rule in self.guarding.rules if rule.screens == on)

    def of_client(self, name: str) -> tuple[GuardrailConfig, ...]:
        """The guardrails on the answers of the client's tool ``name`` (its source's
        label is ``client``)."""
        return tuple(
            rule
            for rule in self.guarding.rules
            if rule.screens == "tool_result"
            and fnmatch.fnmatchcase(CLIENT_SOURCE, rule.source)
            and any(fnmatch.fnmatchcase(name, pattern) for pattern in rule.tools)
        )

    @property
    def screens_answers(self) -> bool:
        """Whether a guardrail screens the model's final answers."""
        return any(rule.screens == "final_answer" for rule in self.guarding.rules)

    @property
    def screens_client(self) -> bool:
        """Whether a guardrail screens what the client sends: its input, or its own
        tools' answers."""
        return any(
            rule.screens == "input"
            or (rule.screens == "tool_result" and fnmatch.fnmatchcase(CLIENT_SOURCE, rule.source))
            for rule in self.guarding.rules
        )

    def of(self, tool: Tool) -> ToolPolicy:
        """``tool``'s effects, trust and approval for this tenant (worked out once per
        tool object: a reload builds new tenants)."""
        known = self._tools.get(id(tool))
        if known is not None and known[0] is tool:
            return known[1]
        answer = self._work_out(tool)
        self._tools[id(tool)] = (tool, answer)
        return answer

    def _work_out(self, tool: Tool) -> ToolPolicy:
        effects: Effects = tool.effects
        output: Trust = tool.output
        approval: Approval = "never"
        cost = 0.0
        for rule in self.gateway_rules:
            if matches(rule, tool):
                effects = rule.effects or effects
                output = rule.output or output
                approval = rule.approval or approval
                cost = rule.cost_usd if rule.cost_usd is not None else cost
        for rule in self.tenant_rules:
            if matches(rule, tool):
                effects = tighter(_EFFECTS, effects, rule.effects)
                output = tighter(_TRUST, output, rule.output)
                approval = tighter(_APPROVAL, approval, rule.approval)
                cost = max(cost, rule.cost_usd or 0.0)  # a tenant may only price higher
        guardrails = tuple(
            rule
            for rule in self.guarding.rules
            if rule.screens == "tool_result" and matches(rule, tool)
        )
        decided = [tool.fingerprint, tool.name, effects, output, approval, self.after_untrusted]
        version = hashlib.sha256(canonical(decided).encode()).hexdigest()[:16]
        return ToolPolicy(effects, output, approval, version, cost, guardrails)


def guarding_of(gateway: GuardrailsConfig, tenant: GuardrailsConfig | None) -> GuardrailsConfig:
    """A tenant's guardrails: the gateway's and its own (a name of the gateway's it uses
    again is its own guardrail's, beside the gateway's), the stream settings it sets in
    place of the gateway's."""
    if tenant is None:
        return gateway
    names = {rule.name for rule in gateway.rules}
    own = [
        rule
        if rule.name not in names
        else rule.model_copy(update={"name": f"tenant.{rule.name}"[:64]})
        for rule in tenant.rules
    ]
    settings = {key: getattr(tenant, key) for key in tenant.model_fields_set - {"rules"}}
    return gateway.model_copy(update={"rules": [*gateway.rules, *own], **settings})


def unmatched_rules(
    config: PolicyConfig, tenants: Sequence[tuple[str, TenantPolicyConfig]], tools: Sequence[Tool]
) -> list[str]:
    """Where a rule names no tool of ``tools``: ``policy.tools[i]`` or
    ``tenants[<id>].policy.tools[i]`` (for ``toolgate check``)."""
    found = []
    for where, rules in [("policy.tools", config.tools)] + [
        (f"tenant {tenant_id!r}: policy.tools", policy.tools) for tenant_id, policy in tenants
    ]:
        for index, rule in enumerate(rules):
            if not any(matches(rule, tool) for tool in tools):
                found.append(f"{where}[{index}] ({', '.join(rule.tools)}) matches no tool")
    guarding = [("policy.guardrails", config.guardrails)] + [
        (f"tenant {tenant_id!r}: policy.guardrails", policy.guardrails)
        for tenant_id, policy in tenants
        if policy.guardrails is not None
    ]
    for where, said in guarding:
        for guardrail in said.rules:
            screens, source = guardrail.screens, guardrail.source
            if screens != "tool_result" or fnmatch.fnmatchcase(CLIENT_SOURCE, source):
                continue  # a client's tools are not known before its requests
            if not any(matches(guardrail, tool) for tool in tools):
                found.append(f"{where}: guardrail {guardrail.name!r} screens no tool's results")
    return found
