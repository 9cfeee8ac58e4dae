"""Sorting a message's tool calls by who runs them (pure)."""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Partition:
    server: list[dict[str, Any]] = field(default_factory=list)
    client: list[dict[str, Any]] = field(default_factory=list)
    unavailable: list[dict[str, Any]] = field(default_factory=list)  # unknown or not allowed


def call_name(call: dict[str, Any]) -> str | None:
    function = call.get("function")
    if isinstance(function, dict) and isinstance(function.get("name"), str):
        return str(function["name"])
    custom = call.get("custom")
    if isinstance(custom, dict) and isinstance(custom.get("name"), str):
        return str(custom["name"])
    return None


def partition_calls(
    calls: list[dict[str, Any]], server: Container[str], client: Container[str]
) -> Partition:
    """Split calls into server calls (tools in play), client calls (the request's own
    tools) and unavailable ones (anything else: unknown, or not allowed)."""
    result = Partition()
    for call in calls:
        name = call_name(call)
        if name is not None and name in client:
            result.client.append(call)
        elif name is not None and call.get("type", "function") == "function" and name in server:
            result.server.append(call)
        else:
            result.unavailable.append(call)
    return result
