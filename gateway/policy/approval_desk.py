"""Approvals bound to the exact call (docs/design.md §13): asking, and checking an answer.

A held call becomes an ``ApprovalRecord`` bound to the tenant, the caller's identity,
the tool, a digest of the canonical arguments the model wrote and the tool's policy
version; it expires. An answer counts only for that call: ``binding_problem`` says
why one does not (another user, other arguments, a changed policy, too late). Using
it deletes it (``ApprovalStore.take``), so it counts once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
import time
from collections.abc import Awaitable, Callable

from gateway.config import ApprovalsConfig
from gateway.errors import StoreUnavailable
from gateway.policy.rules import ToolPolicy
from gateway.store.approval_records import (
    ApprovalRecord,
    ApprovalStore,
    Approver,
    Decision,
    Ended,
)
from gateway.values import ToolCall
from tool_registry import ToolArgumentsInvalid, canonical_arguments, immutable, parse_arguments

Notify = Callable[[ApprovalRecord], Awaitable[None]]  # an operator approval is pending

POLL_S = 0.2  # how often a waiting run looks for an operator's decision
MAX_REASON = 500  # characters of an approver's reason the model reads


def arguments_text(raw: str | None) -> str:
    """The canonical form of the arguments a model wrote (valid: they were prepared)."""
    return canonical_arguments(parse_arguments(raw))


def digest(arguments: str) -> str:
    return hashlib.sha256(arguments.encode()).hexdigest()


@immutable
class Answer:
    """A client's answer to an approval, as its request carried it. ``tool`` and
    ``arguments`` are what the client says it approved (the request it answers, when
    it sent that back too)."""

    approval_id: str
    approve: bool
    reason: str | None = None
    tool: str | None = None
    arguments: str | None = None


def binding_problem(
    record: ApprovalRecord,
    call: ToolCall,
    owner: str,
    policy: ToolPolicy,
    answer: Answer,
    now: float,
) -> str | None:
    """Why ``answer`` does not approve ``call``, or None if it does."""
    if record.owner != owner:
        return "it was asked of another user"
    if record.by != "client":
        return "it is an operator's to decide"
    if record.expires <= now:
        return "it expired"
    if record.call_id != call.id or record.tool != call.name:
        return "it was asked for another call"
    try:
        written = arguments_text(call.arguments)
    except ToolArgumentsInvalid:
        return "the call's arguments are not what was asked"
    if digest(written) != record.digest:
        return "the call's arguments are not what was asked"
    if answer.tool is not None and answer.tool != record.tool:
        return "the answer is for another tool"
    if answer.arguments is not None:
        try:
            echoed = arguments_text(answer.arguments)
        except ToolArgumentsInvalid:
            echoed = None
        if echoed != record.arguments:
            return "the answer approves other arguments"
    if policy.version != record.version:
        return "the policy changed since it was asked"
    return None


class ApprovalDesk:
    """Where one request's held calls get a person's answer: its client (handed the
    approval), an operator (the run waits), or nobody (refused)."""

    def __init__(
        self,
        store: ApprovalStore | None,
        tenant: str,
        owner: str,
        config: ApprovalsConfig,
        approver: Approver | None,
        notify: Notify | None = None,
        request_id: str = "",
    ) -> None:
        self.store = store
        self.request_id = request_id
        self.tenant = tenant
        self.owner = owner
        self.config = config
        self.approver: Approver | None = approver if store is not None else None
        self._notify = notify

    def record(
        self, call: ToolCall, policy: ToolPolicy, why: str, taint: str | None
    ) -> ApprovalRecord:
        assert self.approver is not None  # asked only when someone can approve
        arguments = arguments_text(call.arguments)
        now = time.time()
        ttl = self.config.ttl_s if self.approver == "client" else self.config.timeout_s
        return ApprovalRecord(
            id=f"mcpr_{secrets.token_hex(12)}",
            tenant=self.tenant,
            owner=self.owner,
            tool=call.name or "",
            arguments=arguments,
            digest=digest(arguments),
            version=policy.version,
            call_id=call.id,
            by=self.approver,
            why=why,
            taint=taint,
            created=now,
            expires=now + ttl,
            request_id=self.request_id,
        )

    async def wait(self, record: ApprovalRecord, deadline: float | None) -> Decision | None:
        """Keep an operator's approval, tell whoever listens, and wait for the decision
        (None: none came within ``approvals.timeout_s`` or the request's deadline).
        The approval is taken either way: a late decision finds nothing."""
        assert self.store is not None
        await self.store.create(record)
        if self._notify is not None:
            await self._notify(record)
        clock = asyncio.get_running_loop()
        until = clock.time() + self.config.timeout_s
        ended: Ended | None = "left"  # unless it ends otherwise: the client went away
        out_of_time: Ended = "expired"
        if deadline is not None and deadline < until:
            until, out_of_time = deadline, "deadline"
        try:
            while True:
                with contextlib.suppress(StoreUnavailable):  # a blip: ask again
                    decision = await self.store.decision(self.tenant, record.id)
                    if decision is not None:
                        ended = None
                        return decision
                if clock.time() + POLL_S > until:
                    ended = out_of_time
                    return None
                await asyncio.sleep(POLL_S)
        finally:
            with contextlib.suppress(StoreUnavailable):  # it expires by itself then
                await asyncio.shield(self._ended(record.id, ended))

    async def _ended(self, approval_id: str, why: Ended | None) -> None:
        """Take the approval (a late decision finds nothing) and say why it ended."""
        assert self.store is not None
        await self.store.take(self.tenant, approval_id)
        if why is not None:
            await self.store.end(self.tenant, approval_id, why)
