from __future__ import annotations

import pytest

from gateway.store import RateMode, gcra


@pytest.mark.parametrize(
    ("tat", "now", "cost", "mode", "allowed", "remaining", "stored"),
    [
        (None, 1000.0, 1, "acquire", True, 9, 1600.0),  # 10 per 6 s: 600 ms each
        (7000.0, 1000.0, 1, "acquire", False, 0, None),  # full: 6 s of credit in use
        (6400.0, 1000.0, 1, "acquire", True, 0, 7000.0),  # the last one fits exactly
        (500.0, 1000.0, 2, "acquire", True, 8, 2200.0),  # an old TAT counts as now
        (7000.0, 1000.0, 5, "charge", True, 0, 10000.0),  # charged past the limit
        (7000.0, 1000.0, 1, "peek", False, 0, None),
        (3000.0, 1000.0, 1, "peek", True, 6, None),  # peeking stores nothing
    ],
)
def test_gcra(
    tat: float | None,
    now: float,
    cost: int,
    mode: RateMode,
    allowed: bool,
    remaining: int,
    stored: float | None,
) -> None:
    decision, new_tat = gcra(tat, now, 10, 6000, cost, mode)
    assert decision.allowed is allowed
    assert decision.remaining == remaining
    assert new_tat == stored


def test_retry_after_is_when_one_more_fits() -> None:
    decision, _ = gcra(7000.0, 1000.0, 10, 6000, 1, "acquire")
    assert decision.retry_after_s == pytest.approx(0.6)
    over, _ = gcra(10000.0, 1000.0, 10, 6000, 1, "peek")
    assert over.retry_after_s == pytest.approx(3.6)
