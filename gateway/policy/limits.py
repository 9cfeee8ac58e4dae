"""What one request may do: the tenant's policy narrowed by the request (pure)."""

from __future__ import annotations

from gateway.config import LimitsConfig, OnLimit
from gateway.errors import PolicyDenied
from tool_registry import immutable


@immutable
class Narrowing:
    """What one request asks to narrow: never wider than the tenant's policy."""

    tools: frozenset[str] | None = None
    max_iterations: int | None = None
    max_tool_calls: int | None = None
    untrusted_input: bool = False  # x-toolgate-input: untrusted (docs/design.md §13)
    max_tokens: int | None = None  # of the whole run (x-toolgate-max-tokens)
    max_cost_usd: float | None = None  # of the whole run (x-toolgate-max-cost-usd)


@immutable
class LoopLimits:
    max_iterations: int
    max_tool_calls: int
    max_parallel_tools: int
    request_timeout_s: float
    on_limit: OnLimit
    max_tokens_per_request: int | None = None  # the run's envelope (docs/design.md §13)
    max_cost_usd_per_request: float | None = None


def _narrowest(a: int | float | None, b: int | float | None) -> int | float | None:
    return b if a is None else a if b is None else min(a, b)


def effective_limits(limits: LimitsConfig, narrowing: Narrowing) -> LoopLimits:
    """The tenant's caps, narrowed (never widened) by the request."""
    iterations = limits.max_iterations
    if narrowing.max_iterations is not None:
        iterations = min(iterations, narrowing.max_iterations)
    calls = limits.max_tool_calls
    if narrowing.max_tool_calls is not None:
        calls = min(calls, narrowing.max_tool_calls)
    tokens = _narrowest(limits.max_tokens_per_request, narrowing.max_tokens)
    cost = _narrowest(limits.max_cost_usd_per_request, narrowing.max_cost_usd)
    return LoopLimits(
        iterations,
        calls,
        limits.max_parallel_tools,
        limits.request_timeout_s,
        limits.on_limit,
        None if tokens is None else int(tokens),
        cost,
    )


def effective_tools(
    allowed: tuple[str, ...],
    narrowing: Narrowing,
    client_tools: frozenset[str],
    members: frozenset[str] | None = None,
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The server tools in play, and those a client tool of the same name shadows.

    The tenant's allowlist, narrowed by the request. Naming a tool the tenant may not
    use is refused (403) with the same words whether or not the tool exists. A client
    tool named like a server tool wins for the request (docs/design.md §6): a client that
    knows nothing of the tenant's tools must not fail on a common name like ``search``.
    ``members``: ``allowed`` as a set, when the caller keeps one (a catalog of thousands
    is not walked per request for a client's few names).
    """
    tools = allowed
    if narrowing.tools is not None:
        refused = sorted(narrowing.tools.difference(allowed))
        if refused:
            raise PolicyDenied(
                f"Tool {refused[0]!r} is not available to this API key.",
                param="toolgate.tools",
                code="tool_not_allowed",
            )
        tools = tuple(t for t in allowed if t in narrowing.tools)
    if not client_tools:
        return tools, ()
    if members is not None and tools is allowed and client_tools.isdisjoint(members):
        return tools, ()
    shadowed = tuple(t for t in tools if t in client_tools)
    if not shadowed:
        return tools, ()
    return tuple(t for t in tools if t not in client_tools), shadowed
