"""Recent runs for an operator (docs/design.md §19, JSON first): ``GET /v1/toolgate/runs`` —
the newest requests of the tenants a key may see, filtered by tenant, model, status,
outcome, tool, cost and time, found by request id, a page at a time — and
``GET /v1/toolgate/runs/{tenant}/{request_id}`` — one run with its trace and the
timeline of its rounds and tool calls. The console's Runs pages stand on ``RunQuery``
and ``timeline`` here.

What a trace holds is hostile text (tool names, arguments, results): JSON carries it,
a page escapes it."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.digits import whole
from gateway.engine.report import RUN_OUTCOMES
from gateway.errors import BadRequest, NotFound
from gateway.store.runs import RunRow, Scanned
from gateway.surfaces.http import Exchange, json_response
from gateway.surfaces.operator.keys import OperatorScope, operator_admitted
from tool_registry import immutable

if TYPE_CHECKING:
    from gateway.runtime.services import Gateway

ROUTES = "The runs routes"
SHOWN = 200  # rows a listing answers unless it asks for fewer
MAX_TEXT = 128  # of a filter's text
STATUSES = ("", "ok", "error")


@immutable
class RunQuery:
    """Which runs to list: every field empty lists them all."""

    tenant: str = ""
    model: str = ""
    status: str = ""  # "ok" (below 400), "error" (400 and up), or one status code
    tool: str = ""
    min_cost_usd: float | None = None
    limit: int = SHOWN
    outcome: str = ""  # one of ``RUN_OUTCOMES``
    request_id: str = ""  # the one run of this id (in each tenant read)
    since: float | None = None  # began at or after (epoch seconds)
    until: float | None = None  # began before
    before: float | None = None  # the page after one that ended with a run begun then

    @classmethod
    def of(cls, query: Mapping[str, str]) -> RunQuery:
        """From a query string; a value that cannot be one is a 400 naming it."""
        status = query.get("status", "").strip()
        if status not in STATUSES and not (len(status) == 3 and whole(status) is not None):
            raise BadRequest("status is ok, error or a status code.", param="status")
        cost = query.get("min_cost", "").strip()
        min_cost = None
        if cost:
            try:
                min_cost = float(cost)
            except ValueError:
                min_cost = math.nan
            if not math.isfinite(min_cost) or min_cost < 0:
                raise BadRequest("min_cost is a number of dollars, 0 or more.", param="min_cost")
        limit = whole(query.get("limit", str(SHOWN)))
        if limit is None or not 1 <= limit <= 1000:
            raise BadRequest("limit is a number from 1 to 1000.", param="limit")
        outcome = query.get("outcome", "").strip()
        if outcome and outcome not in RUN_OUTCOMES:
            raise BadRequest(f"outcome is one of {', '.join(RUN_OUTCOMES)}.", param="outcome")
        return cls(
            tenant=query.get("tenant", "").strip()[:MAX_TEXT],
            model=query.get("model", "").strip()[:MAX_TEXT],
            status=status,
            tool=query.get("tool", "").strip()[:MAX_TEXT],
            min_cost_usd=min_cost,
            limit=limit,
            outcome=outcome,
            request_id=query.get("request_id", "").strip()[:MAX_TEXT],
            since=_moment(query, "since"),
            until=_moment(query, "until"),
            before=_moment(query, "before"),
        )

    @property
    def narrowed(self) -> bool:
        """Whether anything but the tenant narrows the listing."""
        return bool(
            self.model
            or self.status
            or self.tool
            or self.outcome
            or self.request_id
            or self.min_cost_usd is not None
            or self.since is not None
            or self.until is not None
        )

    def admits(self, row: RunRow) -> bool:
        if self.outcome and row.outcome != self.outcome:
            return False
        if self.since is not None and row.at < self.since:
            return False
        if self.until is not None and row.at >= self.until:
            return False
        if self.before is not None and row.at >= self.before:
            return False
        if self.model and row.model != self.model:
            return False
        if self.status == "ok" and row.status >= 400:
            return False
        if self.status == "error" and row.status < 400:
            return False
        code = whole(self.status)
        if code is not None and row.status != code:
            return False
        if self.tool and self.tool not in row.tools:
            return False
        return not (self.min_cost_usd is not None and (row.cost_usd or 0.0) < self.min_cost_usd)

    def tenants(self, scope: OperatorScope) -> list[str]:
        """The tenants to read: the one asked for (if the key may see it), else all."""
        if not self.tenant:
            return [tenant.id for tenant in scope.tenants]
        if scope.tenant(self.tenant) is None:
            raise NotFound(f"No tenant {self.tenant[:64]!r} this key may see.")
        return [self.tenant]


def _moment(query: Mapping[str, str], name: str) -> float | None:
    """A time: epoch seconds, or an ISO 8601 date and time (UTC unless it says
    otherwise: what a browser's ``datetime-local`` field sends)."""
    said = query.get(name, "").strip()[:64]
    if not said:
        return None
    try:
        at = float(said)
    except ValueError:
        try:
            moment = datetime.fromisoformat(said)
        except ValueError:
            raise BadRequest(
                f"{name} is a time: 2026-11-27T09:30 (UTC) or epoch seconds.", param=name
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        at = moment.timestamp()
    if not math.isfinite(at) or at < 0:
        raise BadRequest(f"{name} is a time: 2026-11-27T09:30 (UTC) or epoch seconds.", param=name)
    return at


async def list_runs(gateway: Gateway, scope: OperatorScope, query: RunQuery) -> Scanned:
    """The newest runs the query admits among the tenants the key may see; by request
    id, that run wherever it is kept (not only among the newest read)."""
    tenants = query.tenants(scope)
    if not query.request_id:
        return await gateway.runs.scan(tenants, query.admits, query.limit)
    rows = []
    for tenant in tenants:
        row = await gateway.runs.find(tenant, query.request_id)
        if row is not None and query.admits(row):
            rows.append(row)
    return Scanned(rows, len(rows), len(rows), True)


@immutable
class Bar:
    """One step of a run on its timeline: a round (the model asked) or a tool call."""

    kind: str  # "round", "call", or "wait" (a call's wait for an operator, before it)
    label: str
    at_ms: float
    duration_ms: float
    lane: int  # 0 for the model's rounds; calls made at once take lanes of their own
    outcome: str  # a call's outcome, a round's "final" or "tools"
    detail: Mapping[str, Any]  # its entry in the trace


@immutable
class Timeline:
    bars: tuple[Bar, ...]
    total_ms: float
    lanes: int
    measured: bool  # when steps began was recorded (else laid end to end)


def timeline(trace: Mapping[str, Any]) -> Timeline:
    """A trace's rounds and tool calls on one time axis. A trace that says when each
    step began is drawn as it went; an older one, its steps laid end to end (a round,
    then its calls side by side)."""
    rounds = [r for r in _listed(trace.get("rounds")) if isinstance(r, Mapping)]
    calls = [c for c in _listed(trace.get("tool_calls")) if isinstance(c, Mapping)]
    measured = all("at_ms" in step for step in [*rounds, *calls]) and bool(rounds or calls)
    steps: list[tuple[str, Mapping[str, Any], float, float]] = []
    if measured:
        steps = [("round", r, _ms(r.get("at_ms")), _ms(r.get("duration_ms"))) for r in rounds]
        steps += [("call", c, _ms(c.get("at_ms")), _ms(c.get("duration_ms"))) for c in calls]
    else:
        by_id = {c["id"]: c for c in calls if isinstance(c.get("id"), str)}
        cursor = 0.0
        for r in rounds:
            duration = _ms(r.get("duration_ms"))
            steps.append(("round", r, cursor, duration))
            cursor += duration
            made = [
                by_id[i] for i in _listed(r.get("tool_calls")) if isinstance(i, str) and i in by_id
            ]
            for call in made:
                steps.append(("call", call, cursor, _ms(call.get("duration_ms"))))
            cursor += max((_ms(c.get("duration_ms")) for c in made), default=0.0)
    steps.sort(key=lambda step: (step[2], step[0] != "round"))
    bars: list[Bar] = []
    ends: list[float] = []  # when each call lane is free again
    for kind, entry, at, duration in steps:
        if kind == "round":
            lane = 0
            label = f"round {entry.get('iteration', '?')} · {entry.get('upstream', '')}"
            outcome = "tools" if _listed(entry.get("tool_calls")) else "final"
        else:
            waited = min(_waited(entry), at)  # for an operator's approval, before it ran
            lane = next((i for i, end in enumerate(ends) if end <= at - waited), len(ends))
            if lane == len(ends):
                ends.append(0.0)
            ends[lane] = at + duration
            lane += 1
            label, outcome = str(entry.get("name", "?")), str(entry.get("outcome", ""))
            if waited > 0:
                wait = "waiting for approval"
                bars.append(
                    Bar(
                        kind="wait",
                        label=wait,
                        at_ms=at - waited,
                        duration_ms=waited,
                        lane=lane,
                        outcome="wait",
                        detail=entry,
                    )
                )
        bars.append(
            Bar(
                kind=kind,
                label=label,
                at_ms=at,
                duration_ms=duration,
                lane=lane,
                outcome=outcome,
                detail=entry,
            )
        )
    total = max((b.at_ms + b.duration_ms for b in bars), default=0.0)
    return Timeline(tuple(bars), total, 1 + len(ends), measured)


def _waited(call: Mapping[str, Any]) -> float:
    """How long a call waited for an operator's decision (ms), by its verdict."""
    why = call.get("policy")
    return _ms(why.get("waited_ms")) if isinstance(why, Mapping) else 0.0


def _listed(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list) else ()


def _ms(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0.0
    return max(float(value), 0.0)


async def run_of(
    gateway: Gateway, scope: OperatorScope, tenant: str, request_id: str
) -> tuple[RunRow | None, dict[str, Any] | None]:
    """One run of a tenant the key may see: its row (while listed) and its trace
    (while kept); a 404 where there is neither."""
    if scope.tenant(tenant) is None:
        raise NotFound(f"No tenant {tenant[:64]!r} this key may see.")
    request_id = request_id[:128]
    row = await gateway.runs.find(tenant, request_id)
    trace = await gateway.traces.load(tenant, request_id) if gateway.traces is not None else None
    if row is None and trace is None:
        raise NotFound(f"No run {request_id!r} of {tenant[:64]!r} is kept.")
    return row, trace


class Runs:
    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    async def list(self, request: Request, exchange: Exchange) -> Response:
        scope = await operator_admitted(self._gateway, request, ROUTES)
        query = RunQuery.of(request.query_params)
        listed = await list_runs(self._gateway, scope, query)
        return json_response(
            {
                "object": "list",
                "data": [row.public() for row in listed.rows],
                "matched": listed.matched,
                "read": listed.read,
                "complete": listed.complete,
                "keeping": self._gateway.runs.keeping,
            }
        )

    async def one(self, request: Request, exchange: Exchange) -> Response:
        scope = await operator_admitted(self._gateway, request, ROUTES)
        params = request.path_params
        row, trace = await run_of(self._gateway, scope, params["tenant"], params["request_id"])
        return json_response(
            {
                "object": "toolgate.run_detail",
                "run": row.public() if row is not None else None,
                "trace": trace,
            }
        )
