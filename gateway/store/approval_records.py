"""Approvals in the store (docs/design.md §13): a pending approval, bound to the exact call
it is for, and its decision — on any replica.

A client's approval is answered by the client's next request, which takes the record
(``take``: read and deleted at once, so an approval is used once). An operator's is
listed in a per-tenant index, decided once (``decide``: the first decision stands),
and taken by the run that waits for it. Each operator's decision is also kept in the
tenant's history (``Decided``, newest first, ``HISTORY_KEPT`` of them for
``HISTORY_TTL_S``): what was decided, by whom and when.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from typing import Any, Literal, TypeVar

from gateway.errors import StoreUnavailable
from gateway.store.guard import GuardedStore
from gateway.store.keys import Keys
from tool_registry import dumps, immutable, loads_object

logger = logging.getLogger("gateway.approvals")

Approver = Literal["client", "operator"]
_Record = TypeVar("_Record")


def _parsed(cls: type[_Record], raw: bytes | None) -> _Record | None:
    """A stored record of ``cls``, or None where there is none or it is not one
    (written by another version)."""
    found = loads_object(raw) if raw is not None else None
    if found is None:
        return None
    try:
        return cls(**found)
    except TypeError:
        return None


@immutable
class ApprovalRecord:
    """A call waiting for a person's yes or no, and everything it is bound to."""

    id: str
    tenant: str
    owner: str  # the caller's identity, digested (``identity.owner_digest``)
    tool: str
    arguments: str  # canonical JSON of what the model wrote, as the approver sees it
    digest: str  # of ``arguments``
    version: str  # of the tool's policy when it was asked (``rules.ToolPolicy.version``)
    call_id: str
    by: Approver
    why: str  # the rule that asked for it
    taint: str | None  # what the run had read that was untrusted, if anything
    created: float  # epoch seconds
    expires: float
    request_id: str = ""  # of the run that asked (none in records of older versions)

    def public(self) -> dict[str, Any]:
        """As ``GET /v1/toolgate/approvals`` shows it."""
        return {
            "id": self.id,
            "object": "toolgate.approval",
            "tenant": self.tenant,
            "request_id": self.request_id or None,
            "tool": self.tool,
            "arguments": self.arguments,
            "reason": self.why,
            "tainted_by": self.taint,
            "created_at": int(self.created),
            "expires_at": int(self.expires),
        }

    @classmethod
    def parse(cls, raw: bytes | None) -> ApprovalRecord | None:
        return _parsed(cls, raw)


@immutable
class Decision:
    """A person's answer to an approval."""

    approve: bool
    reason: str | None
    decider: str  # "client", or "operator" and which key

    @classmethod
    def parse(cls, raw: bytes | None) -> Decision | None:
        return _parsed(cls, raw)


DecideOutcome = Literal["decided", "missing", "already"]
# Why an operator's approval stopped waiting without a decision: nobody decided within
# ``approvals.timeout_s``, the request's own deadline came first, or its client left.
Ended = Literal["expired", "deadline", "left"]
ENDINGS: tuple[Ended, ...] = ("expired", "deadline", "left")
ENDED_TTL_S = 3600.0  # how long the console can say why a card no longer waits
HISTORY_KEPT = 1000  # decisions a tenant's history keeps
HISTORY_TTL_S = 30 * 86400.0  # after its last decision


@immutable
class Decided:
    """One operator decision in the tenant's history."""

    id: str
    tenant: str
    tool: str
    arguments: str
    why: str  # the rule that asked
    approve: bool
    reason: str | None
    decider: str  # ``operator:admin`` or ``operator:`` and the key digest's first digits
    asked_at: float
    decided_at: float

    def public(self) -> dict[str, Any]:
        return {"object": "toolgate.approval.decided", **asdict(self)}

    @classmethod
    def parse(cls, raw: bytes) -> Decided | None:
        return _parsed(cls, raw)


class ApprovalStore:
    def __init__(self, store: GuardedStore, keys: Keys) -> None:
        self._store = store
        self._keys = keys

    async def create(self, record: ApprovalRecord) -> None:
        """Keep a pending approval until it expires; an operator's is listed too."""
        ttl = max(record.expires - time.time(), 0.001)
        value = dumps(asdict(record))
        await self._store.put(self._keys.approval(record.tenant, record.id), value, ttl)
        if record.by == "operator":
            index = self._keys.approvals_pending(record.tenant)
            await self._store.field_put(index, record.id, value, ttl)

    async def peek(self, tenant: str, approval_id: str) -> ApprovalRecord | None:
        return ApprovalRecord.parse(await self._store.get(self._keys.approval(tenant, approval_id)))

    async def take(self, tenant: str, approval_id: str) -> ApprovalRecord | None:
        """The pending approval, which is then gone: an approval is used once."""
        record = ApprovalRecord.parse(
            await self._store.take(self._keys.approval(tenant, approval_id))
        )
        if record is not None and record.by == "operator":
            await self._store.field_delete(self._keys.approvals_pending(tenant), approval_id)
        return record

    async def pending(self, tenant: str) -> list[ApprovalRecord]:
        """The operator approvals of ``tenant`` still waiting, oldest first."""
        index = self._keys.approvals_pending(tenant)
        now, live = time.time(), []
        for name, raw in (await self._store.fields(index)).items():
            record = ApprovalRecord.parse(raw)
            if record is None or record.expires <= now:
                await self._store.field_delete(index, name)
            else:
                live.append(record)
        decided = await self._store.get_many([self._decision_key(tenant, r.id) for r in live])
        found = [record for record, d in zip(live, decided, strict=True) if d is None]
        return sorted(found, key=lambda r: r.created)

    async def decide(self, tenant: str, approval_id: str, decision: Decision) -> DecideOutcome:
        """Record an operator's answer: the first one stands."""
        key = self._keys.approval(tenant, approval_id)
        record = ApprovalRecord.parse(await self._store.get(key))
        if record is None or record.by != "operator":
            return "missing"
        ttl = max(record.expires - time.time(), 0.001)
        if not await self._store.put_new(
            self._decision_key(tenant, approval_id), dumps(asdict(decision)), ttl
        ):
            return "already"
        decided = Decided(
            id=record.id,
            tenant=tenant,
            tool=record.tool,
            arguments=record.arguments,
            why=record.why,
            approve=decision.approve,
            reason=decision.reason,
            decider=decision.decider,
            asked_at=record.created,
            decided_at=time.time(),
        )
        key = self._keys.decisions(tenant)
        try:
            await self._store.push_capped(key, dumps(asdict(decided)), HISTORY_KEPT, HISTORY_TTL_S)
        except StoreUnavailable:  # the decision stands: only its line in the history is lost
            logger.warning("decision on %s not kept in the history: store unavailable", record.id)
        return "decided"

    async def history(self, tenant: str, count: int = HISTORY_KEPT) -> list[Decided]:
        """The tenant's operator decisions, newest first."""
        found = await self._store.newest(self._keys.decisions(tenant), count)
        return [decided for raw in found if (decided := Decided.parse(raw)) is not None]

    async def end(self, tenant: str, approval_id: str, why: Ended) -> None:
        """Say why an operator's approval stopped waiting undecided (for the pages
        that still show it)."""
        await self._store.put(self._ended_key(tenant, approval_id), why.encode(), ENDED_TTL_S)

    async def ended(self, tenant: str, approval_id: str) -> Ended | None:
        raw = await self._store.get(self._ended_key(tenant, approval_id))
        said = raw.decode("ascii", "replace") if raw is not None else None
        return next((why for why in ENDINGS if why == said), None)

    def _ended_key(self, tenant: str, approval_id: str) -> str:
        return self._keys.approval(tenant, approval_id) + ":ended"

    async def decision(self, tenant: str, approval_id: str) -> Decision | None:
        return Decision.parse(await self._store.get(self._decision_key(tenant, approval_id)))

    def _decision_key(self, tenant: str, approval_id: str) -> str:
        return self._keys.approval(tenant, approval_id) + ":decision"
