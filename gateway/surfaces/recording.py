"""Recordings of requests' trajectories, for replay against another model (issue 26).

A tenant's ``record`` (or ``recordings.record``) says which of its requests that ran
the tool loop are recorded: ``off``, ``errors`` (an error status, a failed tool call, a
cap reached), ``all``, or a share between 0.0 and 1.0. A recording holds what a replay
needs: the request as the client sent it and as the loop began it, the server tools'
definitions as the model
saw them (each with a fingerprint and its effects), each round's answer, each tool
call's arguments and the result the model read, and how the request ended. It is kept
in the request's trace (``GET /v1/toolgate/traces/{id}`` shows it) for
``recordings.ttl_s``, redacted like everything else: configured secrets replaced,
arguments bound from request headers hidden. One larger than ``recordings.max_bytes``
is not kept (the trace says so).
"""

from __future__ import annotations

import random
from typing import Any

from gateway.config import Record
from gateway.engine.loop import Final, HandBack
from gateway.engine.report import RunReport
from gateway.engine.runner import CallRecord
from gateway.values import ToolCall
from tool_registry import ToolRegistry, definition_fingerprint

VERSION = 1


def keeps(mode: Record, status: int, report: RunReport, draw: float | None = None) -> bool:
    """Whether a request is recorded: by its tenant's mode and how it went."""
    if mode == "off":
        return False
    if mode == "all":
        return True
    if mode == "errors":
        failed_call = any(r.outcome != "ok" for r in report.calls)
        return status >= 400 or failed_call or bool(report.caps) or report.stopped is not None
    return (random.random() if draw is None else draw) < mode


def _call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "name": call.name, "arguments": call.arguments, "kind": call.kind}


def _tool_call(registry: ToolRegistry, record: CallRecord) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": record.call_id,
        "name": record.name,
        "arguments": record.redacted_arguments(registry),
        "outcome": record.outcome,
        "result": record.result,
    }
    if record.reused_from is not None:
        entry["reused_from"] = record.reused_from
    return entry


def _ending(report: RunReport) -> dict[str, Any] | None:
    outcome = report.choices[0].outcome
    if isinstance(outcome, Final):
        turn = outcome.answer.turn
        return {
            "kind": "final",
            "content": turn.content,
            "refusal": turn.refusal,
            "finish_reason": outcome.finish_reason,
        }
    if isinstance(outcome, HandBack):
        return {"kind": "hand_back", "calls": [_call(c) for c in outcome.calls]}
    return None


def recording(
    report: RunReport,
    request: dict[str, Any] | None,
    loop_start: dict[str, Any] | None,
    route: str,
    model: str,
    status: int,
    error: str | None,
) -> dict[str, Any]:
    """What a replay of this request needs (not yet redacted of configured secrets)."""
    policy = report.policy
    registry = policy.registry
    tools = []
    for name in policy.server_tools:
        tool = registry.get(name)
        if tool is None:
            continue
        tools.append(
            {
                "name": name,
                "definition": tool.definition,
                "fingerprint": definition_fingerprint(tool.definition),
                "source": tool.label,
                "effects": policy.rules.of(tool).effects,
            }
        )
    return {
        "version": VERSION,
        "route": route,
        "model": model,
        "upstream_model": report.upstream_model,
        "request": request,
        # The chat-dialect request the loop started from (the Responses surface's
        # input made messages): what a replay sends, whatever the surface.
        "loop": loop_start,
        "tools": tools,
        "rounds": list(report.answers),
        "tool_calls": [_tool_call(registry, r) for r in report.calls],
        "ended": _ending(report),
        "status": status,
        "error": error,
        "usage": report.usage,
    }
