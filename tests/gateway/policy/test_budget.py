"""Prices and a run's budget (docs/design.md §13): usage read as hostile input, costs rounded
up, the envelope's room before each round, settling with what the upstream reported."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.config import ModelPrice
from gateway.errors import BadRequest, BudgetExceeded, QuotaExceeded
from gateway.policy.limits import LoopLimits
from gateway.policy.prices import Counts, Rates, read_usage
from gateway.policy.run_budget import RoundGrant, RunBudget, Stop
from gateway.store import GuardedStore, Keys
from gateway.store.budget_counters import BudgetStore
from gateway.store.memory import MemoryStore
from gateway.surfaces.request_fields import parse_narrowing
from gateway.upstream.numbers import MAX_COUNT as ABSURD_TOKENS
from gateway.upstream.numbers import checked_usage

pytestmark = pytest.mark.anyio

USAGE_TABLE: list[tuple[Any, Counts | None]] = [
    ({"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}, Counts(100, 20)),
    (
        {
            "prompt_tokens": 100,
            "completion_tokens": 20,
            "prompt_tokens_details": {"cached_tokens": 60},
            "completion_tokens_details": {"reasoning_tokens": 15},
        },
        Counts(100, 20, 60, 15),
    ),
    (
        {
            "input_tokens": 7,
            "output_tokens": 3,
            "input_tokens_details": {"cached_tokens": 2},
            "output_tokens_details": {"reasoning_tokens": 1},
        },
        Counts(7, 3, 2, 1),
    ),
    ({"prompt_tokens": 2, "total_tokens": 2}, Counts(2, 0)),  # embeddings
    ({"prompt_tokens": 5, "completion_tokens": 1, "prompt_tokens_details": None}, Counts(5, 1)),
    (None, None),  # missing: the reservation is charged
    ({}, None),
    ("lots", None),
    ({"prompt_tokens": -5, "completion_tokens": 3}, None),  # negative
    ({"prompt_tokens": 5, "completion_tokens": ABSURD_TOKENS + 1}, None),  # absurd
    ({"prompt_tokens": True, "completion_tokens": 3}, None),  # not a count
    ({"prompt_tokens": 5.5, "completion_tokens": 3}, None),
    ({"prompt_tokens": 5, "completion_tokens": "3"}, None),
    (
        {"prompt_tokens": 5, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 9}},
        None,
    ),
    ({"prompt_tokens": 5, "completion_tokens": 3, "prompt_tokens_details": []}, None),
    (
        {
            "prompt_tokens": 5,
            "completion_tokens": 3,
            "completion_tokens_details": {"reasoning_tokens": 4},
        },
        None,
    ),
]


@pytest.mark.parametrize(("usage", "counts"), USAGE_TABLE)
def test_usage_is_read_or_refused(usage: Any, counts: Counts | None) -> None:
    assert read_usage(usage) == counts


PRICE = ModelPrice(input_per_mtok=2.5, output_per_mtok=10.0, cached_input_per_mtok=1.25)

TINY = ModelPrice(input_per_mtok=0.0001, output_per_mtok=0)  # 100 pico-USD a token

COST_TABLE = [
    # (counts, price) → nano-USD, rounded up
    (Counts(1_000_000, 0), PRICE, 2_500_000_000),  # a million input tokens: $2.50
    (Counts(0, 1_000_000), PRICE, 10_000_000_000),
    (Counts(1_000_000, 0, cached=1_000_000), PRICE, 1_250_000_000),
    (Counts(100, 20, cached=60), PRICE, 40 * 2_500 + 60 * 1_250 + 20 * 10_000),
    (Counts(1, 0), ModelPrice(input_per_mtok=0.15, output_per_mtok=0.6), 150),
    (Counts(3, 0), TINY, 1),  # 0.3 nano → 1
    (Counts(10, 0), TINY, 1),  # exactly 1
    (Counts(11, 0), TINY, 2),  # 1.1 → 2
    (Counts(1000, 1000), ModelPrice(input_per_mtok=0, output_per_mtok=0), 0),
]


@pytest.mark.parametrize(("counts", "price", "nanos"), COST_TABLE)
def test_costs_are_exact_then_rounded_up(counts: Counts, price: ModelPrice, nanos: int) -> None:
    assert counts.nanos(Rates.of(price)) == nanos


def test_cached_input_is_priced_as_input_unless_it_has_a_price() -> None:
    rates = Rates.of(ModelPrice(input_per_mtok=3, output_per_mtok=15))
    assert rates.cached_input == rates.input == rates.cache_write == 3_000_000
    assert not Rates.of(None)


def test_cache_reads_and_writes_are_parts_of_the_input_at_their_own_prices() -> None:
    price = ModelPrice(
        input_per_mtok=3, output_per_mtok=15, cached_input_per_mtok=0.3, cache_write_per_mtok=3.75
    )
    usage = {
        "prompt_tokens": 1000,
        "completion_tokens": 10,
        "prompt_tokens_details": {"cached_tokens": 600, "cache_write_tokens": 300},
    }
    counts = read_usage(usage)
    assert counts == Counts(1000, 10, 600, 0, 300)
    # 100 fresh at $3, 600 read at $0.30, 300 written at $3.75, 10 out at $15 (per million)
    assert counts.nanos(Rates.of(price)) == 300_000 + 180_000 + 1_125_000 + 150_000
    lying = {**usage, "prompt_tokens_details": {"cached_tokens": 800, "cache_write_tokens": 300}}
    assert read_usage(lying) is None  # more read and written than the input holds


@given(
    st.integers(0, 10**7),
    st.integers(0, 10**7),
    st.integers(0, 10**7),
    st.floats(0, 100),
    st.floats(0, 100),
)
def test_a_cost_is_never_below_its_exact_value_nor_a_nano_above(
    fresh: int, cached: int, out: int, price_in: float, price_out: float
) -> None:
    price = ModelPrice(input_per_mtok=price_in, output_per_mtok=price_out)
    rates = Rates.of(price)
    exact_pico = (fresh + cached) * rates.input + out * rates.output
    nanos = Counts(fresh + cached, out, cached).nanos(rates)
    assert exact_pico <= nanos * 1000 < exact_pico + 1000


def _limits(
    tokens: int | None = None, cost: float | None = None, on_limit: str = "final_answer"
) -> LoopLimits:
    return LoopLimits(8, 32, 4, 60.0, on_limit, tokens, cost)  # type: ignore[arg-type]


async def test_the_envelope_sets_each_rounds_max_tokens_to_what_is_left() -> None:
    budget = RunBudget(_limits(tokens=3000), Rates(), "acme")
    grant = await budget.before_round(1000, None, first=True)
    assert isinstance(grant, RoundGrant)
    assert (grant.max_tokens, grant.last) == (2000, None)
    spent = budget.after_round(grant, {"prompt_tokens": 900, "completion_tokens": 100})
    assert (spent.tokens, spent.cost_usd, spent.estimated) == (1000, 0.0, False)
    # 2000 left, the next prompt about 1100: 900 for the answer
    second = await budget.before_round(1100, None, first=False)
    assert isinstance(second, RoundGrant)
    assert second.max_tokens == 900
    budget.after_round(second, {"prompt_tokens": 1100, "completion_tokens": 700})
    # 200 left: a last round (no tools) needs 16, and gets what is left
    third = await budget.before_round(100, None, first=False)
    assert isinstance(third, RoundGrant)
    assert (third.max_tokens, third.last) == (100, "tokens")
    budget.after_round(third, {"prompt_tokens": 100, "completion_tokens": 95})
    assert await budget.before_round(100, None, first=False) == Stop("tokens")


async def test_a_client_bound_below_the_room_is_kept_and_above_it_is_narrowed() -> None:
    budget = RunBudget(_limits(tokens=5000), Rates(), "acme")
    kept = await budget.before_round(1000, 300, first=True)
    assert isinstance(kept, RoundGrant)
    assert kept.max_tokens == 300
    budget.release(kept)
    narrowed = await budget.before_round(1000, 100_000, first=True)
    assert isinstance(narrowed, RoundGrant)
    assert narrowed.max_tokens == 4000


async def test_the_cost_envelope_binds_by_price() -> None:
    rates = Rates.of(ModelPrice(input_per_mtok=1.0, output_per_mtok=4.0))
    budget = RunBudget(_limits(cost=0.01), rates, "acme")  # 10_000_000 nanos
    grant = await budget.before_round(2000, None, first=True)  # $0.002 of prompt
    assert isinstance(grant, RoundGrant)
    assert grant.max_tokens == (10_000_000 - 2_000_000) // 4_000  # 4000 nano-USD a token
    assert grant.nanos == 10_000_000


async def test_a_first_round_that_cannot_fit_is_422_and_a_later_one_with_on_limit_error_too() -> (
    None
):
    with pytest.raises(BudgetExceeded, match="max_tokens_per_request"):
        await RunBudget(_limits(tokens=500), Rates(), "acme").before_round(490, None, True)
    budget = RunBudget(_limits(tokens=500, on_limit="error"), Rates(), "acme")
    grant = await budget.before_round(100, None, True)
    assert isinstance(grant, RoundGrant)
    budget.after_round(grant, {"prompt_tokens": 100, "completion_tokens": 300})
    with pytest.raises(BudgetExceeded) as raised:
        await budget.before_round(100, None, False)
    assert raised.value.status == 422
    assert raised.value.code == "budget_exceeded"


@pytest.mark.parametrize(
    "usage", [None, {"prompt_tokens": -1, "completion_tokens": 0}, {"prompt_tokens": 10**12}]
)
async def test_hostile_or_missing_usage_is_charged_its_reservation(usage: Any) -> None:
    budget = RunBudget(_limits(tokens=10_000), Rates(), "acme")
    grant = await budget.before_round(1000, 500, first=True)
    assert isinstance(grant, RoundGrant)
    spent = budget.after_round(grant, usage)
    assert spent.line()["usage_estimated"] is True
    assert budget.spent_tokens == 1500


async def test_tool_costs_are_paid_while_the_envelope_has_room() -> None:
    budget = RunBudget(_limits(cost=0.05), Rates(), "acme")
    assert await budget.afford_tools([20_000_000, 20_000_000, 20_000_000]) == 2
    assert budget.spent_nanos == 40_000_000
    assert await budget.afford_tools([20_000_000]) == 0


async def test_a_spent_window_is_429_insufficient_quota_saying_when_it_resets() -> None:
    store = BudgetStore(GuardedStore(MemoryStore(), None), Keys("t:"), lambda: 1_795_000_000.0)
    windows = store.windows("acme", {"day": (1_000, None), "month": (None, None)})
    budget = RunBudget(_limits(), Rates(), "acme", windows, store)
    grant = await budget.before_round(100, None, first=True)
    assert isinstance(grant, RoundGrant)
    assert grant.max_tokens == 900
    budget.after_round(grant, {"prompt_tokens": 100, "completion_tokens": 850})
    assert await budget.before_round(100, None, first=False) == Stop("quota")
    await budget.close()
    assert await store.used(windows) == [(950, 0), (950, 0)]  # settled: 50 given back
    with pytest.raises(QuotaExceeded) as raised:
        await RunBudget(_limits(), Rates(), "acme", windows, store).before_round(100, None, True)
    error = raised.value
    assert (error.status, error.type, error.code) == (
        429,
        "insufficient_quota",
        "insufficient_quota",
    )
    assert "1000 tokens (tokens_per_day)" in error.message
    assert "resets at 2026-11-19T00:00:00Z" in error.message
    assert int(error.headers["retry-after"]) > 0


async def test_a_window_that_cannot_hold_the_next_round_says_what_it_needs_and_what_is_left() -> (
    None
):
    """$0.54 of a day's $1 is left, and the next round could cost more (its prompt and
    the least answer a round is made with): the 429 says so, not "used up", and agrees
    with the remaining-budget header."""
    store = BudgetStore(GuardedStore(MemoryStore(), None), Keys("t:"), lambda: 1_795_000_000.0)
    windows = store.windows("acme", {"day": (None, 1_000_000_000), "month": (None, None)})
    rates = Rates(input=10_000_000, output=10_000_000)  # $10 a million tokens each way

    async def run_spending(prompt: int, answer: int) -> None:
        """One run of one round that used ``prompt`` and ``answer`` tokens."""
        run = RunBudget(_limits(), rates, "acme", windows, store)
        grant = await run.before_round(prompt, 1, first=True)
        assert isinstance(grant, RoundGrant)
        run.after_round(grant, {"prompt_tokens": prompt, "completion_tokens": answer})
        await run.close()

    await run_spending(46_000, 0)
    budget = RunBudget(_limits(), rates, "acme", windows, store)
    with pytest.raises(QuotaExceeded) as raised:
        await budget.before_round(60_000, None, first=True)
    message = raised.value.message
    assert "is used up" not in message
    assert "could cost up to $0.60016; $0.54 is left" in message
    assert "$1 (cost_usd_per_day)" in message
    assert budget.headers()["x-toolgate-budget-remaining-usd"] == "0.54"
    await run_spending(53_999, 1)  # the rest, to the nano-dollar
    after = RunBudget(_limits(), rates, "acme", windows, store)
    with pytest.raises(QuotaExceeded, match="is used up"):  # nothing left: said so
        await after.before_round(10, None, True)


@pytest.mark.parametrize("prompt", [2**64, -1, 10.5, True, "12"])
async def test_a_count_not_believed_is_charged_at_its_reservation_not_as_zero(
    prompt: Any,
) -> None:
    """An upstream's unbelievable ``prompt_tokens`` is left out of its usage; the round
    is charged the prompt's estimate for it (it was charged 0), and its answer as said."""
    budget = RunBudget(_limits(tokens=100_000), Rates(), "acme")
    grant = await budget.before_round(1_200, None, first=True)
    assert isinstance(grant, RoundGrant)
    usage, _ = checked_usage({"prompt_tokens": prompt, "completion_tokens": 7})
    assert usage == {"completion_tokens": 7}  # left out (a string as a server's note)
    spent = budget.after_round(grant, usage)
    assert spent.tokens == 1_200 + 7
    assert spent.estimated
    assert budget.spent_tokens == 1_207


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "prompt_tokens",
                    "completion_tokens",
                    "input_tokens",
                    "output_tokens",
                    "prompt_tokens_details",
                    "completion_tokens_details",
                    "input_tokens_details",
                    "output_tokens_details",
                    "cached_tokens",
                    "reasoning_tokens",
                    "total_tokens",
                ]
            ),
            inner,
            max_size=6,
        )
    ),
    max_leaves=12,
)


@given(_json)
def test_any_usage_an_upstream_sends_is_counts_that_add_up_or_none(usage: Any) -> None:
    counts = read_usage(usage)
    if counts is None:
        return
    assert 0 <= counts.cached <= counts.input <= ABSURD_TOKENS
    assert 0 <= counts.reasoning <= counts.output <= ABSURD_TOKENS
    assert counts.nanos(Rates.of(PRICE)) >= 0


@given(st.text(max_size=20))
def test_a_cost_header_is_an_amount_in_range_or_a_400(value: str) -> None:
    refused: BadRequest | None = None
    try:
        narrowing = parse_narrowing(None, {"x-toolgate-max-cost-usd": value})
    except BadRequest as exc:
        refused = exc
    if refused is not None:
        assert refused.param == "x-toolgate-max-cost-usd"
        return
    assert narrowing.max_cost_usd is not None
    assert 0 < narrowing.max_cost_usd <= 1_000_000


async def test_a_large_envelope_never_asks_a_model_for_more_than_it_writes() -> None:
    roomy = RunBudget(_limits(tokens=10**9), Rates(), "acme")
    grant = await roomy.before_round(1000, None, first=True)
    assert isinstance(grant, RoundGrant)
    assert grant.max_tokens == 4096  # the default bound: every chat model accepts it
    model_says = RunBudget(_limits(tokens=10**9), Rates(), "acme", round_output_tokens=32768)
    bounded = await model_says.before_round(1000, None, first=True)
    assert isinstance(bounded, RoundGrant)
    assert bounded.max_tokens == 32768
    client = await model_says.before_round(1000, 100_000, first=True)
    assert isinstance(client, RoundGrant)
    assert client.max_tokens == 100_000  # the client's own bound is the client's affair
    priced_only = RunBudget(_limits(), Rates.of(PRICE), "acme")
    counted = await priced_only.before_round(1000, None, first=True)
    assert isinstance(counted, RoundGrant)
    assert counted.max_tokens is None  # nothing to bound: the round is sent as asked


@pytest.mark.parametrize("value", ["0", "-3", "1000000001", "10e3", "many"])
def test_a_token_envelope_header_out_of_range_is_a_400(value: str) -> None:
    with pytest.raises(BadRequest) as raised:
        parse_narrowing(None, {"x-toolgate-max-tokens": value})
    assert raised.value.param == "x-toolgate-max-tokens"
    with pytest.raises(BadRequest):
        parse_narrowing({"max_tokens": 10**12}, {})
