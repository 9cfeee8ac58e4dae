"""Each tenant's counts per minute (docs/design.md §19's Overview): two replicas' counts,
added to one store, are read by either; a replica's own not yet added are read too; a
store that does not answer keeps a replica's counts for its next flush."""

from __future__ import annotations

import pytest

from gateway.store import GuardedStore, Keys, StoreUnavailable
from gateway.store.activity import Activity, ActivityStore

pytestmark = pytest.mark.anyio
NOW = 1_700_000_000.0


async def test_every_replica_reads_every_replicas_counts(
    backend: tuple[GuardedStore, Keys],
) -> None:
    store, keys = backend
    one = ActivityStore(store, keys, Activity(lambda: NOW))
    two = ActivityStore(store, keys, Activity(lambda: NOW))
    one.activity.count("acme", 200, 2, 1_000, 120.4)
    two.activity.count("acme", 502, 0, None, 30.0)
    await one.flush()
    last = (await two.last_hour(["acme"], NOW))["acme"][-1]  # two's own counted too
    assert (last.requests, last.errors, last.tool_calls, last.cost_nanos) == (2, 1, 2, 1_000)
    assert last.latency_ms == 150
    await two.flush()
    hour = await one.last_hour(["acme", "beta"], NOW)
    assert len(hour["acme"]) == 60
    assert hour["acme"][-1].requests == 2
    assert sum(m.requests for m in hour["beta"]) == 0
    later = await one.last_hour(["acme"], NOW + 3600)  # an hour on: out of the window
    assert sum(m.requests for m in later["acme"]) == 0


class Down:
    """A store that does not answer."""

    async def field_add(self, key: str, increments: dict[str, int], ttl_s: float) -> None:
        raise StoreUnavailable("down")


async def test_counts_the_store_did_not_take_are_added_next_time() -> None:
    activity = Activity(lambda: NOW)
    down = ActivityStore(Down(), Keys("t:"), activity)  # type: ignore[arg-type]
    activity.count("acme", 200, 1, 5)
    await down.flush()
    activity.count("acme", 200, 0, 0)
    assert activity.pending() == {("acme", int(NOW // 60)): [2, 0, 1, 5, 0]}
