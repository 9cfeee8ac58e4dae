"""Operators' decisions (docs/design.md §13, §19): the first decision stands and goes into
the tenant's history, newest first, on every backend; a history that cannot be
written does not undo or fail the decision it records."""

from __future__ import annotations

import time

import pytest

from gateway.store import GuardedStore, Keys, StoreUnavailable
from gateway.store.approval_records import ApprovalRecord, ApprovalStore, Decision
from gateway.store.memory import MemoryStore

pytestmark = pytest.mark.anyio


def held(approval_id: str, tool: str = "create_ticket") -> ApprovalRecord:
    now = time.time()
    return ApprovalRecord(
        approval_id, "acme", "owner", tool, '{"title": "x"}', "d", "v1", "call_1",
        "operator", "approval: always", None, now, now + 60,
    )  # fmt: skip


async def test_decisions_go_into_the_history_newest_first(
    backend: tuple[GuardedStore, Keys],
) -> None:
    store = ApprovalStore(*backend)
    for approval_id in ("a1", "a2"):
        await store.create(held(approval_id))
    assert await store.decide("acme", "a1", Decision(False, "no", "operator:admin")) == "decided"
    assert await store.decide("acme", "a2", Decision(True, None, "operator:1234abcd")) == "decided"
    assert await store.decide("acme", "a2", Decision(False, None, "x")) == "already"
    history = await store.history("acme")
    assert [(d.id, d.approve, d.decider) for d in history] == [
        ("a2", True, "operator:1234abcd"),
        ("a1", False, "operator:admin"),
    ]
    assert history[1].reason == "no"
    assert history[1].asked_at <= history[1].decided_at


class NoLists(MemoryStore):
    """A store that keeps values but cannot write its lists (a failure between calls)."""

    async def push_capped(self, key: str, value: bytes, keep: int, ttl_s: float) -> None:
        raise StoreUnavailable("down")


async def test_a_history_that_cannot_be_written_does_not_fail_the_decision() -> None:
    inner = NoLists()
    store = ApprovalStore(GuardedStore(inner, timeout_s=None), Keys("t:"))
    await store.create(held("a1"))
    assert await store.decide("acme", "a1", Decision(True, None, "operator:admin")) == "decided"
    # Read afresh (the guard holds off a store that just failed): the decision stands.
    again = ApprovalStore(GuardedStore(inner, timeout_s=None), Keys("t:"))
    decided = await again.decision("acme", "a1")
    assert decided is not None
    assert decided.approve is True
