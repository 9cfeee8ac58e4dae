"""What every surface reads first: a JSON object naming a model, and the narrowing a
request asks for (the ``toolgate`` body field and ``x-toolgate-*`` headers, docs/design.md §5)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gateway.config import MAX_TOKENS
from gateway.errors import BadRequest
from gateway.policy.limits import Narrowing
from gateway.values import Message
from tool_registry import loads

_NARROWING_KEYS = frozenset(
    {"tools", "max_iterations", "max_tool_calls", "max_tokens", "max_cost_usd"}
)
_MAX_USD = 1_000_000.0  # more than any one request spends: a typo, refused


def _positive_int(value: Any, param: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BadRequest(f"'{param}' must be an integer of at least {minimum}.", param=param)
    return value


def _header_int(headers: Mapping[str, str], name: str, minimum: int) -> int | None:
    raw = headers.get(name)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        value = minimum - 1
    return _positive_int(value, name, minimum)


def _narrowest(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _tokens(value: Any, param: str) -> int:
    """A run's token envelope: at least 1, and no more than any request spends."""
    count = _positive_int(value, param, 1)
    if count > MAX_TOKENS:
        raise BadRequest(f"'{param}' must be at most {MAX_TOKENS}.", param=param)
    return count


def _usd(value: Any, param: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value <= _MAX_USD
        or value != value  # NaN
    ):
        raise BadRequest(
            f"'{param}' must be an amount in USD above 0 and at most {_MAX_USD:g}.", param=param
        )
    return float(value)


def _header_usd(headers: Mapping[str, str], name: str) -> float | None:
    raw = headers.get(name)
    if raw is None:
        return None
    try:
        value: Any = float(raw.strip())
    except ValueError:
        value = None
    return _usd(value, name)


def _cheapest(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def _tool_names(value: Any, param: str) -> frozenset[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRequest(f"'{param}' must be a list of tool names.", param=param)
    return frozenset(value)


def parse_narrowing(field: Any, headers: Mapping[str, str]) -> Narrowing:
    """Narrowing from the ``toolgate`` body field and ``x-toolgate-*`` headers together."""
    tools: frozenset[str] | None = None
    iterations = _header_int(headers, "x-toolgate-max-iterations", 1)
    calls = _header_int(headers, "x-toolgate-max-tool-calls", 0)
    tokens = _header_int(headers, "x-toolgate-max-tokens", 1)
    if tokens is not None:
        tokens = _tokens(tokens, "x-toolgate-max-tokens")
    cost = _header_usd(headers, "x-toolgate-max-cost-usd")
    header_tools = headers.get("x-toolgate-tools")
    if header_tools is not None:
        tools = frozenset(t.strip() for t in header_tools.split(",") if t.strip())
    if field is not None:
        if not isinstance(field, dict):
            raise BadRequest("'toolgate' must be an object.", param="toolgate")
        unknown = sorted(set(field) - _NARROWING_KEYS)
        if unknown:
            raise BadRequest(f"'toolgate.{unknown[0]}' is not a known field.", param="toolgate")
        if "tools" in field:
            body_tools = _tool_names(field["tools"], "toolgate.tools")
            tools = body_tools if tools is None else tools & body_tools
        if "max_iterations" in field:
            value = _positive_int(field["max_iterations"], "toolgate.max_iterations", 1)
            iterations = _narrowest(iterations, value)
        if "max_tool_calls" in field:
            value = _positive_int(field["max_tool_calls"], "toolgate.max_tool_calls", 0)
            calls = _narrowest(calls, value)
        if "max_tokens" in field:
            value = _tokens(field["max_tokens"], "toolgate.max_tokens")
            tokens = _narrowest(tokens, value)
        if "max_cost_usd" in field:
            cost = _cheapest(cost, _usd(field["max_cost_usd"], "toolgate.max_cost_usd"))
    return Narrowing(tools, iterations, calls, _untrusted_input(headers), tokens, cost)


_INPUT_TRUST = {"trusted": False, "untrusted": True}


def _untrusted_input(headers: Mapping[str, str]) -> bool:
    """``x-toolgate-input: untrusted`` marks the request's own input as words from
    outside (an email pasted into the prompt); ``trusted`` is the tenant's default,
    which a request cannot loosen."""
    raw = headers.get("x-toolgate-input")
    if raw is None:
        return False
    found = _INPUT_TRUST.get(raw.strip().lower())
    if found is None:
        raise BadRequest(
            "'x-toolgate-input' must be 'trusted' or 'untrusted'.", param="x-toolgate-input"
        )
    return found


def user_text(messages: Sequence[Message]) -> str:
    """The last user message's text (what a background rule reads of a request)."""
    for message in reversed(messages):
        if message.role == "user":
            return message.text
    return ""


def model_request(raw: bytes) -> tuple[dict[str, Any], str]:
    """A request body that is a JSON object naming a model (any API surface's first check)."""
    try:
        body = loads(raw)
    except ValueError as exc:
        raise BadRequest("The request body is not valid JSON.") from exc
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("'model' is required and must be a non-empty string.", param="model")
    return body, model
