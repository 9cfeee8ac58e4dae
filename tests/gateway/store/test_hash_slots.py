"""Every Lua script and multi-key call keeps its keys in one hash slot (docs/design.md §14).

The store's calls that name more than one key: ``spend`` (one Lua script over a
tenant's budget windows) must have them in one slot; ``get_many`` (MGET, split by slot
on a cluster), ``delete`` (DEL, split by slot), ``counters`` (a non-transactional
pipeline) may span slots. The rest name one key each (``rate``'s script, ``field_put``'s
transaction on one hash). The contract tests run on a real cluster too
(``tests/gateway/store/conftest.py``); here, the keys' slots by the cluster's own rule, and a
cross-slot script shown refused by the real cluster, so a passing cluster tier means
no script spans slots."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

from gateway.errors import StoreUnavailable
from gateway.store import Keys
from gateway.store.base import Spend, Window
from gateway.store.budget_counters import WINDOWS, BudgetStore
from gateway.store.memory import MemoryStore
from gateway.store.redis import RedisStore, redis_client

tenant_ids = st.from_regex(r"[A-Za-z0-9_.-]{1,64}", fullmatch=True)  # TenantConfig.id
prefixes = st.text(st.characters(codec="utf-8", exclude_characters="{}"), max_size=20)


@given(tenant=tenant_ids, prefix=prefixes)
def test_a_tenants_budget_windows_share_one_slot(tenant: str, prefix: str) -> None:
    budgets = BudgetStore(MemoryStore(), Keys(prefix))
    windows = budgets.windows(tenant, {name: (1, 1) for name in WINDOWS})
    slots = {key_slot(w.window.key.encode()) for w in windows}
    assert len(slots) == 1
    assert len(windows) == len(WINDOWS)


@given(first=tenant_ids, second=tenant_ids)
def test_tenants_spread_over_slots(first: str, second: str) -> None:
    """The tag is the tenant, not the prefix: tenants are not all on one node."""
    keys = Keys("toolgate:")
    if first != second:
        day = "2026-11-24"
        assert keys.budget(first, "day", day) != keys.budget(second, "day", day)
    assert key_slot(keys.budget(first, "day", "d").encode()) == key_slot(f"{{{first}}}".encode())


@pytest.mark.anyio
async def test_the_cluster_refuses_a_script_across_slots(redis_cluster_url: str) -> None:
    """What the cluster tier relies on: were a script's keys in two slots, the real
    cluster would refuse it, and the store say so."""
    store = RedisStore(redis_client(redis_cluster_url, timeout_s=2.0))
    await store.connect()
    keys = Keys("slots:")
    apart = [Window(keys.budget(t, "day", "d"), None, 1000, 60) for t in ("acme", "beta")]
    assert key_slot(apart[0].key.encode()) != key_slot(apart[1].key.encode())
    together = [Window(keys.budget("acme", w, "d"), None, 1000, 60) for w in WINDOWS]
    try:
        granted = await store.spend(together, Spend(nanos=10, max_out=0, min_out=0))
        assert granted.allowed
        with pytest.raises(StoreUnavailable):
            await store.spend(apart, Spend(nanos=10, max_out=0, min_out=0))
    finally:
        await store.delete([w.key for w in together])
        await store.aclose()
