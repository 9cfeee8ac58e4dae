"""What one request may do: the tenant's policy narrowed by the request (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from .chat_request import Narrowing
from .config import LimitsConfig, OnLimit
from .errors import PolicyDenied, ToolNameClash


@dataclass(frozen=True, slots=True)
class LoopLimits:
    max_iterations: int
    max_tool_calls: int
    max_parallel_tools: int
    request_timeout_s: float
    on_limit: OnLimit


def effective_limits(limits: LimitsConfig, narrowing: Narrowing) -> LoopLimits:
    """The tenant's caps, narrowed (never widened) by the request."""
    iterations = limits.max_iterations
    if narrowing.max_iterations is not None:
        iterations = min(iterations, narrowing.max_iterations)
    calls = limits.max_tool_calls
    if narrowing.max_tool_calls is not None:
        calls = min(calls, narrowing.max_tool_calls)
    return LoopLimits(
        iterations, calls, limits.max_parallel_tools, limits.request_timeout_s, limits.on_limit
    )


def effective_tools(
    allowed: tuple[str, ...], narrowing: Narrowing, client_tools: frozenset[str]
) -> tuple[str, ...]:
    """The server tools in play: the tenant's allowlist, narrowed by the request.

    Naming a tool the tenant may not use is refused (403) with the same words whether
    or not the tool exists; a client tool named like a server tool in play is a 400.
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
    clash = sorted(client_tools.intersection(tools))
    if clash:
        raise ToolNameClash(
            f"The request's tool {clash[0]!r} has the name of a server tool; rename it.",
            param="tools",
        )
    return tools
