"""What a round costs (docs/design.md §13): the upstream's usage read as hostile input, and
priced with the model's prices.

Money is counted in whole nano-USD (``int``), so sums never drift and the store adds
integers; prices are kept as pico-USD per token (``$0.15`` per million tokens is 150,000
pico-USD per token), so a round's cost is exact before it is rounded up to nano-USD.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.config import ModelPrice
from gateway.upstream.numbers import MAX_COUNT
from tool_registry import immutable

NANOS_PER_USD = 1_000_000_000


@immutable
class Rates:
    """A model's prices in pico-USD per token."""

    input: int = 0
    cached_input: int = 0
    output: int = 0
    cache_write: int = 0

    @classmethod
    def of(cls, price: ModelPrice | None) -> Rates:
        if price is None:
            return cls()
        cached, written = price.cached_input_per_mtok, price.cache_write_per_mtok
        return cls(
            _pico(price.input_per_mtok),
            _pico(price.input_per_mtok if cached is None else cached),
            _pico(price.output_per_mtok),
            _pico(price.input_per_mtok if written is None else written),
        )

    def __bool__(self) -> bool:
        return bool(self.input or self.cached_input or self.output)

    def tokens_nanos(self, input_tokens: int, output_tokens: int) -> int:
        """What ``input_tokens`` (none cached) and ``output_tokens`` cost at most."""
        return _nanos(input_tokens * self.input + output_tokens * self.output)


def _pico(per_mtok: float) -> int:
    return round(per_mtok * 1_000_000)


def _nanos(pico: int) -> int:
    return -(-pico // 1000)  # rounded up: a round never costs less than it did


def usd(nanos: int) -> float:
    return nanos / NANOS_PER_USD


def nanos_of(usd_amount: float) -> int:
    return round(usd_amount * NANOS_PER_USD)


@immutable
class Counts:
    """A round's tokens as the upstream reported them: ``cached`` (read from the cache)
    and ``written`` (to it) are parts of ``input``, ``reasoning`` part of ``output``."""

    input: int
    output: int
    cached: int = 0
    reasoning: int = 0
    written: int = 0

    @property
    def total(self) -> int:
        return self.input + self.output

    def nanos(self, rates: Rates) -> int:
        fresh = self.input - self.cached - self.written
        return _nanos(
            fresh * rates.input
            + self.cached * rates.cached_input
            + self.written * rates.cache_write
            + self.output * rates.output
        )


def _count(value: Any) -> int | None:
    """A token count, or None for what no honest server reports."""
    if type(value) is not int or value < 0 or value > MAX_COUNT:
        return None
    return value


def _detail(usage: Mapping[str, object], field: str, key: str) -> int | None:
    details = usage.get(field)
    if details is None:
        return 0
    if not isinstance(details, dict):
        return None
    value = details.get(key)
    return 0 if value is None else _count(value)


def unreported(usage: object) -> tuple[bool, bool]:
    """Whether a usage object lacks its input count, and its output count (of the
    dialect it speaks): a part an upstream did not report, or reported past belief
    (``upstream/numbers.py`` leaves those out)."""
    if not isinstance(usage, dict):
        return True, True
    if "input_tokens" in usage or "output_tokens" in usage:
        return "input_tokens" not in usage, "output_tokens" not in usage
    return "prompt_tokens" not in usage, "completion_tokens" not in usage


def read_usage(usage: object) -> Counts | None:
    """The counts of a usage object (chat: ``prompt_tokens``; Responses and others:
    ``input_tokens``), or None when it is missing, negative, absurd, or contradicts
    itself (more cached tokens than input): the caller charges its estimate then.
    Whatever it is given (a recording's usage is anyone's) is read as hostile."""
    if not isinstance(usage, dict):
        return None
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        names = ("prompt_tokens", "completion_tokens", "prompt_tokens_details")
        out_details = "completion_tokens_details"
    elif "input_tokens" in usage or "output_tokens" in usage:
        names = ("input_tokens", "output_tokens", "input_tokens_details")
        out_details = "output_tokens_details"
    else:
        return None
    input_tokens = _count(usage.get(names[0], 0))
    output_tokens = _count(usage.get(names[1], 0))
    cached = _detail(usage, names[2], "cached_tokens")
    written = _detail(usage, names[2], "cache_write_tokens")
    reasoning = _detail(usage, out_details, "reasoning_tokens")
    if (
        input_tokens is None
        or output_tokens is None
        or cached is None
        or written is None
        or reasoning is None
    ):
        return None
    if cached + written > input_tokens or reasoning > output_tokens:
        return None
    return Counts(input_tokens, output_tokens, cached, reasoning, written)
