"""Budgets (docs/design.md §13): what one run may spend, and what its tenant has left.

A ``RunBudget`` is one request's: its envelope (``max_tokens_per_request``,
``max_cost_usd_per_request``, narrowed by the request) counted locally, and the
tenant's windows (a UTC day, a UTC month) counted in the store, where every replica
sees them. Before each round it reserves what the round can spend — the prompt as
estimated, and the answer bounded by the ``max_tokens`` it sets on the round — and
after the round it settles with what the upstream reported (or, when the report is
missing or not believable, with the reservation). A window's settling rides on the
next reservation, so a round costs one store call; what is still unsettled when the
request ends is settled then.

Rules, in the order they are checked before a round:

- less than ``MIN_ROUND_TOKENS`` of room in the envelope (or than the client's own
  ``max_tokens``, when it asks for fewer): no round is made — 422
  ``budget_exceeded`` with ``on_limit: error`` or on the first round, else the run
  ends with the answer so far;
- a window refuses the reservation: 429 ``insufficient_quota`` on the first round or
  with ``on_limit: error``, else the run ends with the answer so far;
- less than ``LAST_ROUND_TOKENS`` of room, with ``on_limit: final_answer``: the round is
  the last (no tools offered), within what is left.
"""

from __future__ import annotations

import logging
import math
from datetime import UTC, datetime

from gateway.config import MAX_TOKENS, BudgetConfig, OnLimit, OnStoreError
from gateway.errors import BudgetExceeded, QuotaExceeded, StoreUnavailable
from gateway.ops.metrics import Metrics
from gateway.policy.limits import LoopLimits
from gateway.policy.prices import Counts, Rates, nanos_of, read_usage, unreported, usd
from gateway.policy.rate_limit import duration
from gateway.store.base import Granted, Spend, out_nanos
from gateway.store.budget_counters import BudgetStore, Limits, TenantWindow, WindowName
from gateway.values import CapKind, UsageCounts
from tool_registry import immutable

logger = logging.getLogger("gateway.budget")

MIN_ROUND_TOKENS = 16  # a round with less room for its answer is not made
LAST_ROUND_TOKENS = 256  # on_limit final_answer: a round with less room offers no tools
DEFAULT_ROUND_OUTPUT = 4096  # a round's answer, at most, for a model of unknown limits

COST_HEADER = "x-toolgate-cost-usd"  # what the request cost
REMAINING_HEADER = "x-toolgate-budget-remaining-usd"  # the tenant's tightest cost window

_WINDOW_WORDS = {"day": "today", "month": "this month"}


def window_limits(budget: BudgetConfig | None) -> dict[WindowName, Limits]:
    """A tenant's windows as the store counts them: tokens and nano-USD (None: not
    limited, only counted)."""
    if budget is None:
        return {"day": (None, None), "month": (None, None)}

    def nanos(value: float | None) -> int | None:
        return None if value is None else nanos_of(value)

    return {
        "day": (budget.tokens_per_day, nanos(budget.cost_usd_per_day)),
        "month": (None, nanos(budget.cost_usd_per_month)),
    }


@immutable
class RoundSpend:
    """What a round spent of a budget: its tokens and cost (its reservation's when its
    usage could not be believed: ``estimated``), and the bound it was asked under."""

    tokens: int
    cost_usd: float
    estimated: bool = False
    max_tokens: int | None = None

    def line(self) -> dict[str, object]:
        """As the trace shows it."""
        line: dict[str, object] = {"tokens": self.tokens, "cost_usd": self.cost_usd}
        if self.estimated:
            line["usage_estimated"] = True
        if self.max_tokens is not None:
            line["max_tokens"] = self.max_tokens
        return line


@immutable
class RoundGrant:
    """What a round may spend, reserved: its ``max_tokens`` (None: the client's own,
    if any), the reservation, and whether the budget makes it the last round."""

    max_tokens: int | None
    tokens: int
    nanos: int
    last: CapKind | None  # the budget cap that makes it the last round, if one does
    in_windows: bool  # reserved in the tenant's windows: to settle there
    prompt: int = 0  # of ``tokens``, the prompt's estimate (the rest: its answer's bound)


@immutable
class Stop:
    """No round can be made: the run ends with the answer it has."""

    kind: CapKind


class RunBudget:
    """One request's spending: its envelope, and its tenant's windows."""

    def __init__(
        self,
        limits: LoopLimits,
        rates: Rates,
        tenant: str,
        windows: list[TenantWindow] | None = None,
        store: BudgetStore | None = None,
        *,
        round_output_tokens: int = DEFAULT_ROUND_OUTPUT,
        on_store_error: OnStoreError = "allow",
        metrics: Metrics | None = None,
    ) -> None:
        self.tokens_limit = limits.max_tokens_per_request
        cost = limits.max_cost_usd_per_request
        self.nanos_limit = None if cost is None else nanos_of(cost)
        self.on_limit: OnLimit = limits.on_limit
        self.rates = rates
        self.tenant = tenant
        self.windows = windows or []  # counted in the store
        self._limited = any(w.limited for w in self.windows)  # reserved in the store too
        self._store = store
        self._round_output = round_output_tokens
        self._on_store_error = on_store_error
        self._metrics = metrics
        self.spent_tokens = 0
        self.spent_nanos = 0  # model rounds and tool calls
        self._reserved_tokens = 0  # by rounds under way (a request's choices run at once)
        self._reserved_nanos = 0
        self._settle_tokens = 0  # owed to (or by) the windows, sent with the next spend
        self._settle_nanos = 0
        self._used: tuple[tuple[int, int], ...] | None = None  # the windows' counters, last seen

    # -- the envelope, counted here ------------------------------------------------

    def _room(self, prompt: int) -> tuple[int | None, CapKind]:
        """Output tokens the envelope leaves a round whose prompt is ``prompt`` tokens
        (None: unbounded), and which limit binds."""
        room: int | None = None
        kind: CapKind = "tokens"
        if self.tokens_limit is not None:
            room = self.tokens_limit - self.spent_tokens - self._reserved_tokens - prompt
        if self.nanos_limit is not None:
            left = self.nanos_limit - self.spent_nanos - self._reserved_nanos
            left -= self.rates.tokens_nanos(prompt, 0)
            by_cost: int | None
            if self.rates.output:
                by_cost = left * 1000 // self.rates.output
            else:
                by_cost = -1 if left < 0 else None
            if by_cost is not None and (room is None or by_cost < room):
                room, kind = by_cost, "cost"
        return room, kind

    def _envelope_error(self, kind: CapKind, prompt: int) -> BudgetExceeded:
        if kind == "tokens":
            what = f"max_tokens_per_request ({self.tokens_limit})"
        else:
            what = f"max_cost_usd_per_request (${usd(self.nanos_limit or 0):g})"
        return BudgetExceeded(
            f"This request's budget, {what}, has no room for another round: "
            f"{self.spent_tokens} tokens and ${usd(self.spent_nanos):.6f} spent so far, "
            f"and the next prompt is about {prompt} tokens."
        )

    # -- before and after each round -----------------------------------------------

    async def before_round(
        self, prompt: int, client_max: int | None, first: bool
    ) -> RoundGrant | Stop:
        """Reserve a round whose prompt is estimated at ``prompt`` tokens, or say why
        it cannot be made (``Stop``, or a 422/429 as the module says)."""
        # The least room worth a round: MIN_ROUND_TOKENS, or less when the client asks
        # for less (a classifier's answer of 1 token, a title of 10).
        need = MIN_ROUND_TOKENS
        if client_max is not None:  # the client's number: no more than any round spends
            client_max = min(client_max, MAX_TOKENS)
            need = max(min(need, client_max), 1)
        room, kind = self._room(prompt)
        if room is not None and room < need:
            if first or self.on_limit == "error":
                raise self._envelope_error(kind, prompt)
            return Stop(kind)
        want = client_max if room is None or client_max is None else min(client_max, room)
        if client_max is None and (room is not None or self._limited):
            # Bounded for the budget, never past what the model writes in one answer.
            want = self._round_output if room is None else min(room, self._round_output)
        closing = self.on_limit == "final_answer"
        last: CapKind | None = (
            kind if closing and room is not None and room < LAST_ROUND_TOKENS else None
        )
        in_windows = False
        if self._limited:
            reserve = Spend(
                tokens=prompt,
                nanos=self.rates.tokens_nanos(prompt, 0),
                out_pico=self.rates.output,
                max_out=want or 0,
                min_out=need,
            )
            granted = await self._spend(reserve)
            if granted is not None:
                if not granted.allowed:
                    if first or self.on_limit == "error":
                        raise quota_error(self.windows, granted, self._clock(), reserve)
                    return Stop("quota")
                in_windows = True
                if want is not None and granted.out < want:
                    if last is None and closing and granted.out < LAST_ROUND_TOKENS:
                        last = "quota"
                    want = granted.out
        out = want or 0
        grant = RoundGrant(
            want, prompt + out, self.rates.tokens_nanos(prompt, out), last, in_windows, prompt
        )
        self._reserved_tokens += grant.tokens
        self._reserved_nanos += grant.nanos
        return grant

    def after_round(self, grant: RoundGrant, usage: UsageCounts | None) -> RoundSpend:
        """The round's answer came: charge what it used (its reservation when the
        upstream's usage is missing or not believable, and a part's share of it — the
        prompt's estimate, the answer's bound — where that part's count was not
        believed: a count left out is not a count of 0). What it spent, for the trace."""
        counts = read_usage(usage)
        estimated = counts is None
        if counts is None:
            tokens, nanos = grant.tokens, grant.nanos
        else:
            unread = unreported(usage)
            if unread != (False, False):
                estimated = True
                prompt, answer = grant.prompt, grant.tokens - grant.prompt
                counts = Counts(
                    prompt if unread[0] else counts.input,
                    answer if unread[1] else counts.output,
                    0 if unread[0] else counts.cached,
                    0 if unread[1] else counts.reasoning,
                    0 if unread[0] else counts.written,
                )
            tokens, nanos = counts.total, counts.nanos(self.rates)
        self._charge(grant, tokens, nanos)
        return RoundSpend(tokens, usd(nanos), estimated, grant.max_tokens)

    def release(self, grant: RoundGrant) -> None:
        """The round failed: it spent nothing the gateway can count."""
        self._charge(grant, 0, 0)

    def _charge(self, grant: RoundGrant, tokens: int, nanos: int) -> None:
        self._reserved_tokens -= grant.tokens
        self._reserved_nanos -= grant.nanos
        self.spent_tokens += tokens
        self.spent_nanos += nanos
        if grant.in_windows:
            self._settle_tokens += tokens - grant.tokens
            self._settle_nanos += nanos - grant.nanos
        elif self.windows:  # counted only, or the store was down: owed in full
            self._settle_tokens += tokens
            self._settle_nanos += nanos

    async def afford_tools(self, costs: list[int]) -> int:
        """How many of the priced calls about to run (their costs in nano-USD, in
        order) the budget pays for; those are charged now."""
        allowed = len(costs)
        if self.nanos_limit is not None:
            left = self.nanos_limit - self.spent_nanos - self._reserved_nanos
            total = 0
            for index, cost in enumerate(costs):
                total += cost
                if total > left:
                    allowed = index
                    break
        nanos = sum(costs[:allowed])
        if nanos and self._limited:
            granted = await self._spend(Spend(nanos=nanos))
            if granted is None:
                self._settle_nanos += nanos
            elif not granted.allowed:
                return 0
        elif nanos and self.windows:
            self._settle_nanos += nanos
        self.spent_nanos += nanos
        return allowed

    async def close(self) -> None:
        """Settle with the windows what the last round turned out to cost."""
        if self.windows and (self._settle_tokens or self._settle_nanos):
            await self._spend(Spend(), settling=True)

    # -- the windows, in the store --------------------------------------------------

    async def _spend(self, spend: Spend, settling: bool = False) -> Granted | None:
        """One call to the store with what is owed settled first. None: the store is
        down and ``store.on_error: allow`` lets the run go on uncounted there."""
        assert self._store is not None
        owed_tokens, owed_nanos = self._settle_tokens, self._settle_nanos
        spend = Spend(
            owed_tokens,
            owed_nanos,
            spend.tokens,
            spend.nanos,
            spend.out_pico,
            spend.max_out,
            spend.min_out,
        )
        try:
            granted = await self._store.spend(self.windows, spend)
        except StoreUnavailable as exc:
            if self._on_store_error == "deny" and not settling:
                raise StoreUnavailable(
                    "Budgets cannot be checked right now; try again shortly.",
                    headers={"retry-after": "1"},
                ) from exc
            logger.warning("budget of tenant %s not counted: store unavailable", self.tenant)
            return None
        self._settle_tokens -= owed_tokens
        self._settle_nanos -= owed_nanos
        self._used = granted.used
        self._gauge()
        return granted

    def _clock(self) -> float:
        return self._store.clock() if self._store is not None else 0.0

    # -- what the response says -----------------------------------------------------

    def remaining_nanos(self) -> int | None:
        """What the tenant's tightest cost window has left, as far as this request
        knows (None: no cost window, or never seen)."""
        if self._used is None:
            return None
        left: int | None = None
        for window, (_, nanos) in zip(self.windows, self._used, strict=True):
            if window.window.nanos is None:
                continue
            here = window.window.nanos - nanos - self._settle_nanos
            left = here if left is None else min(left, here)
        return left if left is None else max(left, 0)

    def headers(self) -> dict[str, str]:
        headers = {COST_HEADER: money(self.spent_nanos)}
        remaining = self.remaining_nanos()
        if remaining is not None:
            headers[REMAINING_HEADER] = money(remaining)
        return headers

    def _gauge(self) -> None:
        if self._metrics is None or self._used is None:
            return
        for window, (_, nanos) in zip(self.windows, self._used, strict=True):
            if window.window.nanos is not None:
                left = max(window.window.nanos - nanos - self._settle_nanos, 0)
                self._metrics.budget_remaining.labels(self.tenant, window.period.window).set(
                    usd(left)
                )


def quota_error(
    windows: list[TenantWindow], granted: Granted, now: float, spend: Spend | None = None
) -> QuotaExceeded:
    """429 ``insufficient_quota``: which window refused, and when it resets. Where it
    refused a round's reservation (``spend``) with something still left, what the round
    could cost beside what is left (a window that says "used up" while the budget's
    header says $0.54 remains would contradict itself)."""
    index = max(granted.refused_by, 0)
    period, limit = windows[index].period, windows[index].window
    tokens, nanos = granted.used[index]
    # The window that is more spent, as a share of its limit (multiplied out: a
    # limit of a fraction of a nano-USD is 0).
    by_cost = limit.tokens is None or (
        limit.nanos is not None and nanos * limit.tokens >= tokens * limit.nanos
    )
    if by_cost and limit.nanos is not None:
        what = f"${usd(limit.nanos):g} (cost_usd_per_{period.window})"
        needs, left = _needs(spend, "nanos"), limit.nanos - nanos
        said = f"could cost up to ${money(needs)}; ${money(left)} is left"
    else:
        what = f"{limit.tokens} tokens (tokens_per_{period.window})"
        needs, left = _needs(spend, "tokens"), (limit.tokens or 0) - tokens
        said = f"could use up to {needs} tokens; {left} are left"
    wait = max(period.resets_at - now, 1.0)
    resets = datetime.fromtimestamp(period.resets_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    budget = f"the budget of this API key for {_WINDOW_WORDS[period.window]}, {what}"
    if spend is not None and left > 0:
        head = f"The next model round of this request {said} of {budget}"
    else:
        head = f"{budget[0].upper()}{budget[1:]}, is used up"
    return QuotaExceeded(
        f"{head} (requests still running count). It resets at {resets} (in {duration(wait)}).",
        headers={"retry-after": str(math.ceil(wait))},
    )


def _needs(spend: Spend | None, kind: str) -> int:
    """The least a refused reservation needed: its prompt and the fewest output tokens
    a round is made with (``min_out``), in tokens or nano-USD."""
    if spend is None:
        return 0
    if kind == "tokens":
        return spend.tokens + spend.min_out
    return spend.nanos + out_nanos(spend.min_out, spend.out_pico)


def money(nanos: int) -> str:
    """USD with nine decimals at most, trailing zeros dropped (``0.0042``, ``0``)."""
    text = f"{nanos / 1_000_000_000:.9f}".rstrip("0").rstrip(".")
    return text or "0"
