"""What happens when a request begins and ends: its metrics, its JSON log line, its
trace in the store, and its span (docs/design.md §9, §14)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from starlette.requests import Request

from gateway.config import RecordingsConfig
from gateway.engine.recorded import encode as encode_recording
from gateway.engine.report import RunOutcome, RunReport
from gateway.engine.runner import CallRecord, ToolRunner
from gateway.errors import ClientClosedRequest
from gateway.ops.afterwards import Afterwards
from gateway.ops.logs import FIELDS
from gateway.ops.metrics import NONE, Metrics
from gateway.ops.spans import Spans
from gateway.policy.prices import read_usage, usd
from gateway.store.activity import Activity
from gateway.store.runs import RunLog, RunRow
from gateway.store.traces import TraceStore
from gateway.surfaces.http import Exchange
from gateway.surfaces.recording import keeps, recording
from tool_registry import Redactor, ToolRegistry, dumps, loads_object

access = logging.getLogger("gateway.access")
logger = logging.getLogger("gateway.recordings")


def loads_object_or_empty(data: bytes) -> dict[str, Any]:
    found = loads_object(data)
    return found if found is not None else {}


TRACE_ID_HEADER = "x-toolgate-trace-id"
# Observed routes whose requests are not runs: a client's model listing (some poll it)
# would push the runs an operator looks for out of the tenant's list.
NOT_RUNS = frozenset({"/v1/models", "/v1/models/{model}"})


def call_entry(
    registry: ToolRegistry, record: CallRecord, result_chars: int, origin: float | None = None
) -> dict[str, Any]:
    """One tool call in a trace: its arguments redacted, its result cut; ``origin``:
    the request's start (``perf_counter``), from which its ``at_ms`` is counted."""
    result = record.result or ""
    if len(result) > result_chars:
        result = result[:result_chars] + f"…[{len(result) - result_chars} more]"
    entry: dict[str, Any] = {  # keys in this order, those of no value left out
        "id": record.call_id,
        "name": record.name,
        "arguments": record.redacted_arguments(registry),
        "outcome": record.outcome,
        "status": record.status,
        "duration_ms": round(record.duration_s * 1000, 3),
    }
    if origin is not None and record.started:
        entry["at_ms"] = round(max(record.started - origin, 0.0) * 1000, 3)
    entry["reused"] = record.reused
    if record.reused_from is not None:
        entry["reused_from"] = record.reused_from
    entry["cached"] = record.cached
    if record.kept:
        entry["kept"] = True
    entry["result"] = result
    if record.policy is not None:
        entry["policy"] = record.policy
    return entry


class Observer:
    def __init__(
        self,
        metrics: Metrics,
        traces: TraceStore | None = None,
        spans: Spans | None = None,
        redactor: Redactor | None = None,
        recordings: RecordingsConfig | None = None,
    ) -> None:
        self.metrics = metrics
        self.traces = traces
        self.spans = spans  # set when tracing is on
        self.redactor = redactor or Redactor(())  # recordings are redacted before kept
        self.recordings = recordings or RecordingsConfig()
        self.runs: RunLog | None = None  # each request's row in its tenant's recent runs
        self.activity: Activity | None = None  # each tenant's counts per minute
        self.console_on: Callable[[], bool] = _off  # the configuration in force says
        # Where the writes an answer does not wait for go (inline until the app starts).
        self.afterwards = Afterwards()

    def begin(self, request: Request, exchange: Exchange, route: str) -> None:
        self.metrics.in_flight.inc()
        exchange.route = route
        spans = self.spans
        if spans is not None:
            client = request.client
            span = exchange.span = spans.request(
                request.method,
                route,
                request.scope.get("scheme", "http"),
                request.headers,
                client.host if client is not None else None,
                exchange.request_id,
            )
            exchange.headers[TRACE_ID_HEADER] = span.trace_id

    def abandon(self, exchange: Exchange) -> None:
        """A request cancelled before it had an answer."""
        self.metrics.in_flight.dec()
        if exchange.span is not None:
            exchange.span.finish(499, exchange.tenant, exchange.model, error="cancelled")

    async def finish(self, exchange: Exchange, status: int) -> None:
        """A request is over: its metrics, its log line, its span, and its trace (with
        its recording, if it is recorded), from its exchange and its run's report."""
        cancelled = status == ClientClosedRequest.status  # the client left (a Stop button)
        report = exchange.report
        if report is not None and report.error is not None and not cancelled:
            exchange.error = report.error.code or report.error.type
        usage = report.usage if report is not None else exchange.usage
        cost = report.cost_nanos if report is not None else exchange.cost_nanos
        tokens = _tokens(usage)
        self._count(exchange, status, report, usage, tokens, cost)
        line = _line(exchange, status, report, tokens, cost)
        access.info("request", extra={FIELDS: line})
        if exchange.span is not None:
            self._end_span(exchange, status, usage, cost)
        traces = self.traces if report is not None else None
        row = None
        if exchange.tenant != NONE and self.console_on():  # what the console shows
            if self.activity is not None:
                calls = report.tool_calls if report is not None else 0
                self.activity.count(exchange.tenant, status, calls, cost, line["latency_ms"])
            runs = self.runs
            if runs is not None and exchange.route not in NOT_RUNS and runs.keeping:
                row = _run_row(exchange, line, report)
        if traces is not None or row is not None:  # kept after the answer is sent
            keep = partial(self._keep, traces, report, exchange, status=status, line=line, row=row)
            held = len(exchange.sent) if exchange.sent is not None else 0  # to record
            await self.afterwards.submit(keep, held)

    async def _keep(
        self,
        traces: TraceStore | None,
        report: RunReport | None,
        exchange: Exchange,
        status: int,
        line: dict[str, Any],
        row: RunRow | None,
    ) -> None:
        """What the store keeps of a request: its trace (with its recording) and its
        row in the runs list."""
        if traces is not None and report is not None:
            await self._keep_trace(traces, report, exchange, status, line)
        if row is not None and self.runs is not None:
            await self.runs.add(row)

    def _count(
        self,
        exchange: Exchange,
        status: int,
        report: RunReport | None,
        usage: Any,
        tokens: tuple[int, int],
        cost: int | None,
    ) -> None:
        m = self.metrics
        m.in_flight.dec()
        tenant, model = exchange.tenant, exchange.model
        series = m.series(tenant, model)
        series.answered(status).inc()
        span = exchange.span  # a traced request is the latency's exemplar: its trace id
        exemplar = {"trace_id": span.trace_id} if span is not None and span.sampled else None
        series.seconds.observe(time.perf_counter() - exchange.started, exemplar)
        if exchange.first_byte is not None:
            series.first_byte().observe(exchange.first_byte - exchange.started, exemplar)
        prompt, completion = tokens
        if prompt:
            series.tokens("prompt").inc(prompt)
        if completion:
            series.tokens("completion").inc(completion)
        counts = read_usage(usage) if usage else None
        if counts is not None:
            for kind, n in (
                ("cached_prompt", counts.cached),
                ("cache_write_prompt", counts.written),
                ("reasoning", counts.reasoning),
            ):
                if n:
                    series.tokens(kind).inc(n)
        if cost:
            m.spend.labels(tenant, model).inc(usd(cost))
        if report is not None:
            m.iterations.labels(tenant).observe(report.iterations)
            for kind in report.caps:
                m.cap_hits.labels(tenant, kind).inc()
        if status == ClientClosedRequest.status:
            m.cancelled.labels(tenant).inc()

    async def _keep_trace(
        self,
        traces: TraceStore,
        report: RunReport,
        exchange: Exchange,
        status: int,
        line: dict[str, Any],
    ) -> None:
        """The request's trace in the store, with its recording if it is recorded."""
        trace = self._trace(traces, report, exchange, line)
        ttl_s = None
        if keeps(exchange.record, status, report):
            # Off the event loop: a recording holds the whole request (up to
            # server.max_body_bytes) and every tool result.
            recorded = await asyncio.to_thread(self._recording, report, exchange, status)
            trace["recording"] = recorded
            ttl_s = max(traces.ttl_s, self.recordings.ttl_s)
        tenant, request_id = exchange.tenant, exchange.request_id
        await traces.save(tenant, request_id, trace, ttl_s)
        if ttl_s is not None and trace["recording"]["kept"]:
            await traces.index_recording(tenant, request_id, exchange.wall_start, ttl_s)

    def _recording(self, report: RunReport, exchange: Exchange, status: int) -> dict[str, Any]:
        """The request's recording, redacted, or why it is not kept (blocking)."""
        found = recording(
            report=report,
            request=loads_object(exchange.sent) if exchange.sent is not None else None,
            loop=exchange.loop_start,
            route=exchange.route,
            model=exchange.model,
            status=status,
            error=exchange.error,
        )
        limit = self.recordings.max_bytes
        encoded = dumps(encode_recording(found))
        if len(encoded) <= limit:  # a larger one is not kept: no need to redact it
            encoded = self.redactor.data(encoded)
        if len(encoded) > limit:
            logger.warning(
                "recording of %s not kept: %d bytes, more than recordings.max_bytes (%d)",
                exchange.request_id,
                len(encoded),
                limit,
            )
            return {"kept": False, "bytes": len(encoded), "max_bytes": limit}
        return {"kept": True, **loads_object_or_empty(encoded)}

    async def tool_call(
        self,
        request_id: str,
        tenant: str,
        tool: str,
        *,
        outcome: str,
        started: float,
        registry: ToolRegistry,
        runner: ToolRunner,
        owner: str | None = None,
    ) -> None:
        """A tool call made for an MCP client (``/mcp``): its log line and its trace
        (``owner``: who alone reads it, where a user made the call)."""
        line = {
            "request_id": request_id,
            "tenant": tenant,
            "route": "/mcp",
            "tool": tool,
            "outcome": outcome,
            "latency_ms": round((time.perf_counter() - started) * 1000, 3),
        }
        access.info("mcp tools/call", extra={FIELDS: line})
        traces = self.traces
        if traces is not None:
            calls = [call_entry(registry, r, traces.result_chars) for r in runner.records]
            owned = {"owner": owner} if owner is not None else {}
            trace = {**line, **owned, "tool_calls": calls}
            await self.afterwards.submit(partial(traces.save, tenant, request_id, trace))

    @staticmethod
    def _end_span(exchange: Exchange, status: int, usage: Any, cost: int | None) -> None:
        assert exchange.span is not None
        report = exchange.report
        caps: list[str] = []
        if report is not None:  # the caps reached, the one that forced the last round among them
            caps = list(report.caps)
            if report.stopped is not None and report.stopped not in caps:
                caps.append(report.stopped)
        exchange.span.finish(
            status,
            exchange.tenant,
            exchange.model,
            error=exchange.error,
            usage=usage,
            iterations=report.iterations if report is not None else None,
            tool_calls=report.tool_calls if report is not None else None,
            reused_calls=report.reused_calls if report is not None else None,
            cost_usd=usd(cost) if cost is not None else None,
            caps=caps,
            stopped=report.stopped_by if report is not None else None,
            guardrails=report.guardrail_lines(acted=True) if report is not None else (),
        )

    def _trace(
        self, traces: TraceStore, report: RunReport, exchange: Exchange, line: dict[str, Any]
    ) -> dict[str, Any]:
        registry, started, chars = report.policy.registry, exchange.started, traces.result_chars
        trace = dict(line)  # the log line's fields, then the trace's own, in this order
        owner = exchange.owner
        if owner is not None:
            trace["owner"] = owner
        trace["started_at"] = exchange.wall_start
        trace["rounds"] = [round_.line(started) for round_ in report.rounds]
        trace["tool_calls"] = [call_entry(registry, r, chars, started) for r in report.calls]
        trace["usage"] = report.usage
        if report.guarded:
            trace["guardrails"] = report.guardrail_lines()
        return trace


def _line(
    exchange: Exchange,
    status: int,
    report: RunReport | None,
    tokens: tuple[int, int],
    cost: int | None,
) -> dict[str, Any]:
    """The request's JSON log line."""
    line: dict[str, Any] = {
        "request_id": exchange.request_id,
        "tenant": exchange.tenant,
        "model": exchange.model,
        "status": status,
        "latency_ms": round((time.perf_counter() - exchange.started) * 1000, 3),
        "prompt_tokens": tokens[0],
        "completion_tokens": tokens[1],
    }
    if report is not None:
        line |= {"iterations": report.iterations, "tool_calls": report.tool_calls}
        if report.reused_calls:
            line["tool_calls_reused"] = report.reused_calls
        if report.kept_calls:  # writes an earlier attempt made, not made again
            line["tool_calls_kept"] = report.kept_calls
        if report.caps:
            line["caps"] = list(report.caps)
        if report.stopped_by is not None:
            line["stopped"] = report.stopped_by
        acted = report.guardrail_lines(acted=True)
        if acted:  # what the guardrails did: which, to what, and how
            line["guardrails"] = [f"{v['guardrail']}:{v['action']}" for v in acted]
        if report.round_cut_off is not None:
            line["round_cut_off"] = report.round_cut_off  # under way when the client left
    if status == ClientClosedRequest.status:
        line["cancelled"] = True
    if cost is not None:
        line["cost_usd"] = usd(cost)
    if exchange.error is not None:
        line["error"] = exchange.error
    if exchange.span is not None:  # the log line and the stored trace name its trace
        line["trace_id"] = exchange.span.trace_id
    return line


def _off() -> bool:
    return False


def _run_row(exchange: Exchange, line: dict[str, Any], report: RunReport | None) -> RunRow:
    """The request's row in the recent runs, from its log line."""
    # The model names the tools (one it may not call, at any length): a tool's name is
    # at most 64 characters, and a row keeps at most 32 of them.
    tools = tuple(dict.fromkeys(r.name[:64] for r in report.calls)) if report is not None else ()
    return RunRow(
        request_id=exchange.request_id,
        at=exchange.wall_start,
        tenant=exchange.tenant,
        model=exchange.model,
        route=exchange.route,
        status=line["status"],
        latency_ms=line["latency_ms"],
        rounds=line.get("iterations", 0),
        tool_calls=line.get("tool_calls", 0),
        tools=tools[:32],
        cost_usd=line.get("cost_usd"),
        prompt_tokens=line["prompt_tokens"],
        completion_tokens=line["completion_tokens"],
        error=line.get("error"),
        trace_id=line.get("trace_id"),
        outcome=_outcome(line["status"], report),
    )


def _outcome(status: int, report: RunReport | None) -> RunOutcome:
    """The run's outcome; a request answered without a run (passed through, or
    refused before one) by its status."""
    if status == ClientClosedRequest.status:
        return "cancelled"
    if status >= 400:
        return "failed"
    return "passed_through" if report is None else report.outcome


def _tokens(usage: Any) -> tuple[int, int]:
    if not isinstance(usage, dict):
        return 0, 0
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (
        prompt if isinstance(prompt, int) else 0,
        completion if isinstance(completion, int) else 0,
    )
