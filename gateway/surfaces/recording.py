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
from collections.abc import Mapping
from typing import Any

from gateway.chat_json import encode_tool
from gateway.config import Record
from gateway.engine.loop import Final, HandBack
from gateway.engine.recorded import Ending, LoopStart, RecordedCall, RecordedTool, Recording
from gateway.engine.report import RunReport
from gateway.engine.runner import CallRecord
from tool_registry import ToolRegistry, definition_fingerprint


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


def _tool_call(registry: ToolRegistry, record: CallRecord) -> RecordedCall:
    return RecordedCall(
        record.call_id,
        record.name,
        record.redacted_arguments(registry),
        record.outcome,
        record.result,
        record.reused_from,
    )


def _ending(report: RunReport) -> Ending | None:
    outcome = report.choices[0].outcome
    if isinstance(outcome, Final):
        turn = outcome.answer.turn
        return Ending("final", turn.content, turn.refusal, outcome.finish_reason)
    if isinstance(outcome, HandBack):
        return Ending("hand_back", calls=outcome.calls)
    return None


def _recorded_tools(report: RunReport) -> tuple[str, ...]:
    """The server tools a recording keeps: every tool in play; when a search chose
    them (docs/design.md §17), those some round offered or the run called (a catalog of
    thousands is not a recording's to keep; a replay offers these)."""
    policy = report.policy
    if policy.search is None:
        return policy.server_tools
    seen = {name for line in report.rounds for name in line.offered or ()}
    seen.update(record.name for record in report.calls)
    return tuple(name for name in policy.server_tools if name in seen)


def recording(
    report: RunReport,
    request: Mapping[str, Any] | None,
    loop: LoopStart | None,
    route: str,
    model: str,
    status: int,
    error: str | None,
) -> Recording:
    """What a replay of this request needs (not yet redacted of configured secrets)."""
    policy = report.policy
    registry = policy.registry
    tools = []
    for name in _recorded_tools(report):
        tool = registry.get(name)
        if tool is None:
            continue
        fingerprint = definition_fingerprint(encode_tool(tool.definition))
        effects = policy.rules.of(tool).effects
        tools.append(RecordedTool(tool.definition, fingerprint, tool.label, effects))
    return Recording(
        loop=loop,
        tools=tuple(tools),
        rounds=report.answers,
        tool_calls=tuple(_tool_call(registry, r) for r in report.calls),
        ended=_ending(report),
        route=route,
        model=model,
        upstream_model=report.upstream_model,
        request=request,
        status=status,
        error=error,
        usage=report.usage,
        guardrails=tuple(report.guardrail_lines()),
    )
