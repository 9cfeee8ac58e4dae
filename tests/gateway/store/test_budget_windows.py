"""Budget windows in the store (docs/design.md §13): the reserve/settle arithmetic as a
table, the Lua script against the pure steps on a real Redis, concurrency, periods and
their reset with an injected clock."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from gateway.config import MAX_TOKENS
from gateway.errors import QuotaExceeded
from gateway.policy.limits import LoopLimits
from gateway.policy.prices import Rates
from gateway.policy.run_budget import RoundGrant, RunBudget
from gateway.store import GuardedStore, Keys
from gateway.store.base import Spend, Window, spend_counters
from gateway.store.budget_counters import BudgetStore, Limits, WindowName, period
from gateway.store.redis import RedisStore, redis_client

pytestmark = pytest.mark.anyio

TTL = 3600.0


def _w(tokens: int | None = None, nanos: int | None = None) -> Window:
    return Window("k", tokens, nanos, TTL)


# counters before, windows, spend → allowed, out, counters after, refused_by
TABLE = [
    # a round reserved whole: prompt 100 tokens, 500 out wanted, 1000 pico-USD/token out
    ([(0, 0)], [_w(10_000)], Spend(tokens=100, max_out=500, min_out=16), True, 500, [(600, 0)], -1),
    # the token window shrinks the answer to what is left
    (
        [(9_700, 0)],
        [_w(10_000)],
        Spend(tokens=100, max_out=500, min_out=16),
        True,
        200,
        [(10_000, 0)],
        -1,
    ),
    # fewer than min_out fit: refused, nothing reserved
    (
        [(9_890, 0)],
        [_w(10_000)],
        Spend(tokens=100, max_out=500, min_out=16),
        False,
        0,
        [(9_890, 0)],
        0,
    ),
    # the cost window binds: 1_000 nanos left after the prompt's 100 → 1000*1000/2000 = 500
    (
        [(0, 8_900)],
        [_w(None, 10_000)],
        Spend(tokens=100, nanos=100, out_pico=2_000, max_out=900),
        True,
        500,
        [(600, 10_000)],
        -1,
    ),
    # output cost rounds up: 3 tokens at 333 pico = 999 pico → 1 nano
    ([(0, 0)], [_w(None, 10)], Spend(out_pico=333, max_out=3), True, 3, [(3, 1)], -1),
    # the second window refuses (a month spent, the day not)
    (
        [(0, 0), (0, 5_000)],
        [_w(None, 100_000), _w(None, 5_000)],
        Spend(nanos=1, max_out=0),
        False,
        0,
        [(0, 0), (0, 5_000)],
        1,
    ),
    # settling first gives back what the last round did not use, then it fits
    (
        [(10_000, 0)],
        [_w(10_000)],
        Spend(settle_tokens=-300, tokens=100, max_out=150, min_out=16),
        True,
        150,
        [(9_950, 0)],
        -1,
    ),
    # settling alone is always allowed, even past the limit
    ([(10_000, 0)], [_w(10_000)], Spend(settle_tokens=250), True, 0, [(10_250, 0)], -1),
    # a priced tool call: a fixed cost, no output
    ([(0, 999_000)], [_w(None, 1_000_000)], Spend(nanos=1_000), True, 0, [(0, 1_000_000)], -1),
    ([(0, 999_001)], [_w(None, 1_000_000)], Spend(nanos=1_000), False, 0, [(0, 999_001)], 0),
    # an unlimited window only counts
    (
        [(5, 5)],
        [_w()],
        Spend(tokens=10, nanos=10, out_pico=1000, max_out=20),
        True,
        20,
        [(35, 35)],
        -1,
    ),
]


@pytest.mark.parametrize(
    ("before", "windows", "spend", "allowed", "out", "after", "refused"), TABLE
)
def test_spend_arithmetic(
    before: list[tuple[int, int]],
    windows: list[Window],
    spend: Spend,
    allowed: bool,
    out: int,
    after: list[tuple[int, int]],
    refused: int,
) -> None:
    granted, stored = spend_counters(before, windows, spend)
    assert (granted.allowed, granted.out, granted.refused_by) == (allowed, out, refused)
    assert stored == after
    assert list(granted.used) == after


@pytest.fixture
def budgets(backend: tuple[GuardedStore, Keys]) -> BudgetStore:
    store, keys = backend
    return BudgetStore(store, keys, Clock(datetime(2026, 11, 24, 23, 59, tzinfo=UTC).timestamp()))


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def test_a_day_window_refuses_when_spent_and_starts_again_at_midnight(
    budgets: BudgetStore,
) -> None:
    limits: dict[WindowName, Limits] = {"day": (1_000, None), "month": (None, None)}
    windows = budgets.windows("acme", limits)
    assert [w.period.label for w in windows] == ["2026-11-24", "2026-11"]
    first = await budgets.spend(windows, Spend(tokens=100, max_out=900, min_out=16))
    assert (first.allowed, first.out) == (True, 900)
    spent = await budgets.spend(windows, Spend(tokens=10, max_out=100, min_out=16))
    assert (spent.allowed, spent.refused_by) == (False, 0)
    assert await budgets.used(windows) == [(1_000, 0), (1_000, 0)]  # the month counts too
    clock = budgets.clock
    assert isinstance(clock, Clock)
    clock.now += 61  # 00:00:01 on the 25th
    tomorrow = budgets.windows("acme", limits)
    assert tomorrow[0].period.label == "2026-11-25"
    again = await budgets.spend(tomorrow, Spend(tokens=10, max_out=100, min_out=16))
    assert (again.allowed, again.out) == (True, 100)
    assert await budgets.used(tomorrow) == [(110, 0), (1_110, 0)]


async def test_concurrent_reservations_never_pass_the_limit(budgets: BudgetStore) -> None:
    limits: dict[WindowName, Limits] = {"day": (None, 1_000_000), "month": (None, None)}
    windows = budgets.windows("acme", limits)
    spends = [Spend(nanos=1_000, out_pico=10_000, max_out=5_000, min_out=16) for _ in range(64)]
    granted = await asyncio.gather(*(budgets.spend(windows, s) for s in spends))
    allowed = [g for g in granted if g.allowed]
    reserved = sum(1_000 + g.out * 10 for g in allowed)
    assert reserved <= 1_000_000
    assert (await budgets.used(windows))[0][1] == reserved
    assert len(allowed) < len(spends)  # some were refused


def test_periods_roll_over_days_months_and_years() -> None:
    eve = datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()
    day, month = period("day", eve), period("month", eve)
    assert (day.label, month.label) == ("2026-12-31", "2026-12")
    assert day.resets_at == month.resets_at == datetime(2027, 1, 1, tzinfo=UTC).timestamp()
    leap = period("month", datetime(2028, 2, 29, 12, tzinfo=UTC).timestamp())
    assert leap.resets_at == datetime(2028, 3, 1, tzinfo=UTC).timestamp()


_windows = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(0, 10**9)),
        st.one_of(st.none(), st.integers(0, 10**12)),
        st.tuples(st.integers(0, 10**9), st.integers(0, 10**12)),
    ),
    min_size=1,
    max_size=2,
)
_spends = st.builds(
    Spend,
    settle_tokens=st.integers(-(10**6), 10**6),
    settle_nanos=st.integers(-(10**9), 10**9),
    tokens=st.integers(0, 10**6),
    nanos=st.integers(0, 10**9),
    out_pico=st.integers(0, 10**8),
    max_out=st.integers(0, 10**6),
    min_out=st.integers(0, 64),
)


@given(windows=_windows, spend=_spends)
def test_the_lua_script_takes_the_same_steps_as_the_pure_arithmetic(
    redis_url: str,
    redis_prefix: str,
    windows: list[tuple[int | None, int | None, tuple[int, int]]],
    spend: Spend,
) -> None:
    client = redis.Redis.from_url(redis_url)
    keys = [f"{redis_prefix}{{lua}}:{uuid.uuid4().hex}" for _ in windows]
    try:
        for key, (_, _, (tokens, nanos)) in zip(keys, windows, strict=True):
            client.hset(key, mapping={"t": tokens, "n": nanos})
        limits = [Window(k, t, n, TTL) for k, (t, n, _) in zip(keys, windows, strict=True)]

        async def run() -> tuple[object, list[tuple[int, int]]]:
            store = RedisStore(redis_client(redis_url, timeout_s=2.0))
            try:
                granted = await store.spend(limits, spend)
                return granted, await store.counters(keys)
            finally:
                await store.aclose()

        granted, stored = asyncio.run(run())
        expected, after = spend_counters([w[2] for w in windows], limits, spend)
        assert granted == expected
        assert stored == after
        assert all(0 < client.pttl(key) <= TTL * 1000 for key in keys)
    finally:
        client.delete(*keys)
        client.close()


async def test_a_clients_absurd_max_tokens_is_reserved_as_no_more_than_any_round_spends(
    budgets: BudgetStore,
) -> None:
    """An unpriced model under a cost window leaves the client's own bound as the only
    bound on a round: 10**30 must not reach the counters (on Redis it would overflow
    HINCRBY, and the store would be taken for down)."""
    limits: dict[WindowName, Limits] = {"day": (None, 1_000_000), "month": (None, None)}
    windows = budgets.windows("acme", limits)
    budget = RunBudget(
        LoopLimits(8, 32, 4, 60.0, "final_answer"), Rates(), "acme", windows, budgets
    )
    grant = await budget.before_round(100, 10**30, first=True)
    assert isinstance(grant, RoundGrant)
    assert grant.max_tokens == MAX_TOKENS
    budget.after_round(grant, {"prompt_tokens": 100, "completion_tokens": 7})
    await budget.close()
    assert await budgets.used(windows) == [(107, 0), (107, 0)]


async def test_a_window_priced_below_a_nano_refuses_with_a_message(budgets: BudgetStore) -> None:
    limits: dict[WindowName, Limits] = {"day": (1_000, 0), "month": (None, None)}
    windows = budgets.windows("acme", limits)
    budget = RunBudget(
        LoopLimits(8, 32, 4, 60.0, "final_answer"),
        Rates(1000, 1000, 1000),
        "acme",
        windows,
        budgets,
    )
    with pytest.raises(QuotaExceeded, match="cost_usd_per_day"):
        await budget.before_round(100, None, first=True)
