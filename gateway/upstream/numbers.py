"""Numbers from the far side, read in one place (issue 34 §3).

An upstream's ``usage`` is hostile input like the rest of its answer: a count may be
negative, fractional, a boolean, absurd (10^12) or contradict the others. Whatever it
says, what leaves ``checked_usage`` is only what could be true, so nothing after it (a
Prometheus counter, a header, a span, a log line, a budget, the client's ``usage``)
ever takes a lie for a count:

- a count (a key ending in ``tokens``) is a whole number from 0 to ``MAX_COUNT``
  (an integral float such as ``12.0`` is read as ``12``); any other number (a server's
  ``cost``, say) is finite and from 0 to ``MAX_COUNT``; anything else is left out;
- ``total_tokens`` is the sum of the two parts when both are there (it is put right
  when it says otherwise), no less than the one part reported where the other never
  was (an embedding's usage: ``prompt_tokens`` and ``total_tokens``), and left out
  when a part was reported and not believed;
- a detail larger than its whole (``cached_tokens`` over ``prompt_tokens``,
  ``reasoning_tokens`` over ``completion_tokens``) is left out, as are the details of
  a whole that was left out.

What was left out or put right is named (never its value) for the log line.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from gateway.values import UsageCounts

logger = logging.getLogger("gateway.upstream")

# More than any model reads or writes in one round: a count past it is not usage.
MAX_COUNT = 100_000_000
_MAX_DEPTH = 3

# (the parts, their details, the detail each may not exceed) per dialect
_WHOLES = (
    ("prompt_tokens", "prompt_tokens_details", "cached_tokens"),
    ("completion_tokens", "completion_tokens_details", "reasoning_tokens"),
    ("input_tokens", "input_tokens_details", "cached_tokens"),
    ("output_tokens", "output_tokens_details", "reasoning_tokens"),
)
_TOTALS = (("prompt_tokens", "completion_tokens"), ("input_tokens", "output_tokens"))
# What nearly every chat answer reports: read at once where all three could be true.
_PLAIN = frozenset(("prompt_tokens", "completion_tokens", "total_tokens"))


def _number(key: str, value: Any) -> int | float | None:
    """``value`` as the number it may be under ``key``, or None."""
    if type(value) is int:
        count: int = value
        return count if 0 <= count <= MAX_COUNT else None
    if type(value) is not float:
        return None
    amount: float = value
    if not math.isfinite(amount) or not 0 <= amount <= MAX_COUNT:
        return None
    if key.endswith("tokens"):
        return int(amount) if amount.is_integer() else None
    return amount


def _kept(raw: dict[str, Any], where: str, refused: list[str], depth: int) -> UsageCounts:
    kept: UsageCounts = {}
    for key, value in raw.items():
        if value is None or isinstance(value, str):  # a null detail, a server's note
            continue
        if isinstance(value, dict):
            if key.endswith("tokens"):  # a count, not details
                refused.append(f"{where}{key}")
            elif depth < _MAX_DEPTH:
                inner = _kept(value, f"{where}{key}.", refused, depth + 1)
                if inner:
                    kept[key] = inner
            continue
        number = _number(key, value)
        if number is None:
            refused.append(f"{where}{key}")
        else:
            kept[key] = number
    return kept


def checked_usage(raw: Any) -> tuple[UsageCounts | None, list[str]]:
    """The usage worth believing in ``raw`` (None: none), and what was left out or
    put right, by name."""
    if type(raw) is dict and raw.keys() == _PLAIN:  # the common shape, when all true
        prompt, completion, total = (
            raw["prompt_tokens"],
            raw["completion_tokens"],
            raw["total_tokens"],
        )
        if (
            type(prompt) is int
            and type(completion) is int
            and type(total) is int
            and 0 <= prompt <= MAX_COUNT
            and 0 <= completion <= MAX_COUNT
            and total == prompt + completion <= MAX_COUNT
        ):
            return dict(raw), []
    return checked_in_full(raw)


def checked_in_full(raw: Any) -> tuple[UsageCounts | None, list[str]]:
    """``checked_usage`` without its shortcut for the common shape."""
    if raw is None:
        return None, []
    if not isinstance(raw, dict):
        return None, ["usage"]
    refused: list[str] = []
    usage = _kept(raw, "", refused, 1)
    for whole, details, part in _WHOLES:
        inner = usage.get(details)
        if not isinstance(inner, dict) or part not in inner:
            continue
        count, limit = inner[part], usage.get(whole)
        if isinstance(count, dict) or limit is None or isinstance(limit, dict) or count > limit:
            del inner[part]
            refused.append(f"{details}.{part}")
            if not inner:
                del usage[details]
    if "total_tokens" in usage:
        _check_total(raw, usage, refused)
    return usage or None, refused


def _check_total(raw: dict[str, Any], usage: UsageCounts, refused: list[str]) -> None:
    """``total_tokens`` held to its parts: their sum, where both are believed; no less
    than the one there is, where the other was never reported (an embedding's usage has
    no completion part); left out where a part was reported and not believed, or the
    parts of two dialects were (no total is both sums)."""
    reported = [pair for pair in _TOTALS if pair[0] in raw or pair[1] in raw]
    if not reported:
        return
    first, second = reported[0]
    one, other = usage.get(first), usage.get(second)
    said = usage["total_tokens"]
    if len(reported) > 1 or not isinstance(said, int | float):
        total = None
    elif isinstance(one, int | float) and isinstance(other, int | float):
        total = one + other
    elif isinstance(one, int | float) and second not in raw:
        total = max(said, one)
    elif isinstance(other, int | float) and first not in raw:
        total = max(said, other)
    else:
        total = None
    if total is None:
        del usage["total_tokens"]
        refused.append("total_tokens")
    elif said != total:
        usage["total_tokens"] = total
        refused.append("total_tokens")


def believed_usage(raw: Any, upstream: str) -> UsageCounts | None:
    """``checked_usage`` of what ``upstream`` reported, with a log line naming what was
    not believed (the names only: the values are the upstream's)."""
    usage, refused = checked_usage(raw)
    if refused:
        logger.warning(
            "upstream %s reported usage that cannot be true: %s left out or put right",
            upstream or "?",
            ", ".join(refused[:8]),
        )
    return usage
