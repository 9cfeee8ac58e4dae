"""Running the server tool calls of one request: concurrently, deduplicated, on budget."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, Protocol

import anyio

from gateway.ops.metrics import NONE, UNKNOWN, Metrics
from gateway.ops.spans import RequestSpan, ToolSpan
from gateway.policy.ledger import Ledger
from gateway.policy.point import PolicyPoint
from gateway.policy.verdicts import Allow, Hold, Refuse, Why
from gateway.store.kept_writes import RequestWrites
from gateway.store.result_cache import ResultCache
from gateway.values import ConnectLink, CredentialRefused, ToolCall, ToolOutput
from tool_registry import (
    CallContext,
    Outcome,
    PreparedCall,
    Tool,
    ToolArgumentsInvalid,
    ToolExecutor,
    ToolRegistry,
    ToolResult,
    error_result,
    immutable,
)

REDACTED = "[redacted]"


class Credentials(Protocol):
    """The user's tokens for tools that call as the user (docs/design.md §18): a token, the
    link where the user makes the connection, or None when the request names no user."""

    async def bearer(self, connection: str) -> str | ConnectLink | CredentialRefused | None: ...

    async def refused(self, connection: str) -> None: ...  # a tool answered 401 to the token


@immutable
class CallRecord:
    """One tool call as it went, for logs, metrics and traces."""

    call_id: str
    name: str
    outcome: Outcome
    status: int | None
    duration_s: float
    cached: bool = False  # answered from the tool-result cache
    arguments: dict[str, Any] | None = None  # as sent, bound values included
    result: str | None = None  # what the model read
    policy: Why | None = None  # the policy point's verdict, where a rule made one
    reused_from: str | None = None  # the id of the same call made earlier, whose result it got
    kept: bool = False  # a write answered with what an earlier attempt of the request kept
    started: float = 0.0  # when it began (``time.perf_counter``)

    @property
    def reused(self) -> bool:
        return self.reused_from is not None

    def redacted_arguments(self, registry: ToolRegistry) -> dict[str, Any] | None:
        """The arguments with every value bound from a request header hidden."""
        if self.arguments is None:
            return None
        tool = registry.get(self.name)
        if tool is None:
            return self.arguments
        hidden = tool.header_bound
        return {k: REDACTED if k in hidden else v for k, v in self.arguments.items()}


@immutable
class Kept:
    """A write call's result, kept by an earlier attempt of the same request."""

    result: ToolResult
    arguments: dict[str, Any]
    tool: Tool


@immutable
class Answered:
    """A call's result as it came, before the policy point admits it: how long it took,
    and whether the cache or an earlier attempt's kept result answered it."""

    result: ToolResult
    elapsed: float
    started: float  # when it began (``time.perf_counter``), its screening not counted
    cached: bool = False
    kept: bool = False


_TIME_SPENT = error_result(
    "The time budget of this request ran out before this tool finished.", "timeout"
)


class ToolRunner:
    """Runs the tool calls of one request, remembering results across its rounds."""

    def __init__(
        self,
        policy: PolicyPoint,
        ledger: Ledger,
        executor: ToolExecutor,
        context: CallContext,
        cache: ResultCache | None = None,
        metrics: Metrics | None = None,
        trace: RequestSpan | None = None,
        writes: RequestWrites | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        self._policy = policy
        self._ledger = ledger
        self._credentials = credentials
        self._writes = writes  # the request's write results, kept for its retries
        self._registry = policy.registry
        self._executor = executor
        self._context = context
        self._semaphore = asyncio.Semaphore(policy.limits.max_parallel_tools)
        self._state = ledger.state
        self._cache = cache
        self._metrics = metrics
        self._done: dict[str, tuple[str, ToolResult]] = {}  # call key → (first id, result)
        self._unsent = 0  # of this round's calls started, those refused before any was sent
        self._why: dict[str, Why] = {}  # call id → the verdict's reasons, for the trace
        self._waits: dict[str, Hold] = {}  # call key → held for an operator
        self.records: list[CallRecord] = []
        self.held: list[Hold] = []  # calls held for the client's approval, this round
        self._trace = trace
        # call id → its span while it runs; None once a failure ended it
        self._spans: dict[str, ToolSpan | None] = {}

    async def run(
        self, calls: Sequence[ToolCall], runnable: int, deadline: float
    ) -> tuple[list[ToolOutput], bool]:
        """The outputs of ``calls`` in their order, and whether time ran out.

        At most ``runnable`` calls are executed; a call whose name and arguments were
        already run in this request gets that result again with a note. A call held
        for the client's approval has no output: it is in ``held``.
        """
        self.held = []
        writes = self._writes
        kept = await self._kept(calls, writes) if writes is not None and writes.scope.retry else {}
        slots, to_run, first_ids, arguments = self._plan(calls, runnable, kept)
        if self._ledger.budget is not None and to_run:
            for key, refused in (await self._policy.afford(self._ledger, to_run)).items():
                self._done[key] = (first_ids[key], refused)
                self._record(first_ids[key], to_run.pop(key).tool.name, refused, 0.0)
        self._state.start_tools(len(to_run), runnable)
        self._unsent = 0
        timed_out = await self._execute(to_run, first_ids, deadline)
        if self._unsent:  # refused at the last moment: counted as no execution
            self._state.not_run(self._unsent)
        outputs = []
        for call, slot in zip(calls, slots, strict=True):
            if slot is None:
                continue  # held: the client is asked
            if isinstance(slot, Kept):  # an earlier attempt of this request made it
                # Its result enters the run as a fresh one does (the policy point admits it).
                result = await self._policy.admit(self._ledger, slot.tool, slot.result, call.id)
                self._state.kept_calls += 1
                self._record(
                    call.id, call.name or "", result, 0.0, arguments=slot.arguments, kept=True
                )
                outputs.append(ToolOutput(call.id, result.content, not result.ok))
                continue
            if isinstance(slot, ToolResult):
                self._record(call.id, call.name or "", slot, 0.0)
                outputs.append(ToolOutput(call.id, slot.content, not slot.ok))
                continue
            first_id, result = self._done[slot]
            content = result.content
            if first_id != call.id:
                content += f"\n[toolgate: same call as {first_id}; its result is reused]"
                self._state.reused_calls += 1
                self._record(
                    call.id,
                    call.name or "",
                    result,
                    0.0,
                    arguments=arguments.get(call.id),
                    reused_from=first_id,
                )
            outputs.append(ToolOutput(call.id, content, not result.ok))
        return outputs, timed_out

    def _is_write(self, tool: Tool) -> bool:
        """What the policy point reads the tool as (its method, the operator's rules)."""
        return self._policy.rules.of(tool).effects == "write"

    async def _kept(
        self, calls: Sequence[ToolCall], writes: RequestWrites
    ) -> dict[str, ToolResult]:
        """A retry's look, before its calls are judged: the write calls an earlier
        attempt of the request made (an approved one is not asked again)."""
        prepared = []
        for call in calls:
            name = call.name
            tool = (
                self._registry.get(name) if name is not None and self._policy.serves(name) else None
            )
            if tool is None or not self._is_write(tool):
                continue
            try:
                prepared.append(tool.prepare(call.arguments, self._context))
            except ToolArgumentsInvalid:
                continue
        return await writes.kept(prepared)

    def _plan(
        self, calls: Sequence[ToolCall], runnable: int, kept: Mapping[str, ToolResult]
    ) -> tuple[
        list[ToolResult | Kept | str | None],
        dict[str, PreparedCall],
        dict[str, str],
        dict[str, dict[str, Any]],
    ]:
        """For each call, a result now, the key of the execution that answers it, or
        None when it is held for the client's approval; and the arguments of each call
        that has an execution's key (for the record of one whose result is reused)."""
        slots: list[ToolResult | Kept | str | None] = []
        to_run: dict[str, PreparedCall] = {}
        first_ids: dict[str, str] = {}
        arguments: dict[str, dict[str, Any]] = {}
        policy = self._policy
        for call in calls:
            allowed = policy.call(call)
            if isinstance(allowed, Refuse):
                slots.append(allowed.result)
                continue
            assert isinstance(allowed, Allow)  # the allowlist runs or refuses
            try:
                prepared = allowed.tool.prepare(call.arguments, self._context)
            except ToolArgumentsInvalid as exc:
                slots.append(error_result(str(exc), "invalid_args"))
                continue
            if kept and prepared.key in kept:
                slots.append(Kept(kept[prepared.key], prepared.arguments, allowed.tool))
                continue
            verdict = policy.clearance(self._ledger, call, allowed.tool)
            if verdict.why is not None:
                self._why[call.id] = verdict.why
            if isinstance(verdict, Refuse):
                slots.append(verdict.result)
                continue
            key = prepared.key
            if isinstance(verdict, Hold):
                if policy.desk is not None and policy.desk.approver == "client":
                    self.held.append(verdict)
                    slots.append(None)
                    continue
                self._waits[key] = verdict
            if key not in self._done and key not in to_run:
                if len(to_run) >= runnable:
                    slots.append(self._policy.over_budget().result)
                    continue
                to_run[key] = prepared
                first_ids[key] = call.id
            arguments[call.id] = prepared.arguments
            slots.append(key)
        return slots, to_run, first_ids, arguments

    async def _execute(
        self, to_run: dict[str, PreparedCall], first_ids: dict[str, str], deadline: float
    ) -> bool:
        if not to_run:
            return False
        if len(to_run) == 1:
            return await self._execute_one(*next(iter(to_run.items())), first_ids, deadline)
        tasks = {
            key: asyncio.create_task(self._one(first_ids[key], prepared))
            for key, prepared in to_run.items()
        }
        timeout = max(deadline - asyncio.get_running_loop().time(), 0)
        try:
            _, pending = await asyncio.wait(tasks.values(), timeout=timeout)
        finally:
            # Out of time, or the client went away: no tool call outlives its request.
            for task in tasks.values():
                task.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.gather(*tasks.values(), return_exceptions=True)
        for key, task in tasks.items():
            if task.cancelled():
                self._done[key] = (first_ids[key], _TIME_SPENT)
                self._record(first_ids[key], to_run[key].tool.name, _TIME_SPENT, 0.0)
            else:
                self._done[key] = (first_ids[key], task.result())
        return bool(pending)

    async def _execute_one(
        self, key: str, prepared: PreparedCall, first_ids: dict[str, str], deadline: float
    ) -> bool:
        """A single call runs in the request's own task: no task to create or wait for,
        and the request's deadline is the tool's own timer when it comes first."""
        call_id = first_ids[key]
        try:
            result = await self._one(call_id, prepared, deadline)
        except TimeoutError:
            self._done[key] = (call_id, _TIME_SPENT)
            self._record(call_id, prepared.tool.name, _TIME_SPENT, 0.0)
            return True
        self._done[key] = (call_id, result)
        return False

    async def _one(
        self, call_id: str, prepared: PreparedCall, deadline: float | None = None
    ) -> ToolResult:
        held = self._waits.pop(prepared.key, None)
        if held is not None:  # an operator answers first, while the run waits
            asked = time.perf_counter()
            verdict = await self._policy.wait_for(held, deadline)
            if verdict.why is not None:  # with how long it waited (the timeline draws it)
                waited_ms = round((time.perf_counter() - asked) * 1000, 1)
                self._why[call_id] = verdict.why | {"waited_ms": waited_ms}
            if isinstance(verdict, Refuse):
                self._record(call_id, prepared.tool.name, verdict.result, 0.0)
                self._unsent += 1
                return verdict.result
        connection = prepared.tool.connection
        if connection is not None:  # it calls as the user: with their token, or not at all
            bearer = await self._bearer(connection)
            if isinstance(bearer, ToolResult):
                self._record(call_id, prepared.tool.name, bearer, 0.0)
                self._unsent += 1
                return bearer
            prepared = replace(prepared, bearer=bearer)
        answered = await self._run(call_id, prepared, deadline)
        result = answered.result
        if connection is not None and result.status == 401 and self._credentials is not None:
            await self._credentials.refused(connection)  # revoked, most likely
        try:  # it enters the run through the policy point, from the tool or the cache
            result = await self._policy.admit(self._ledger, prepared.tool, result, call_id)
        except BaseException as exc:
            self._failed(call_id, exc)
            raise
        self._record(
            call_id,
            prepared.tool.name,
            result,
            answered.elapsed,
            cached=answered.cached,
            arguments=prepared.arguments,
            kept=answered.kept,
            started=answered.started,
        )
        return result

    async def _bearer(self, connection: str) -> str | ToolResult:
        """The user's token for ``connection``; else what the model reads in the call's
        place (the link is kept for the answer's ``x-toolgate-connect``)."""
        found = await self._credentials.bearer(connection) if self._credentials else None
        if isinstance(found, str):
            return found
        if found is None:
            return error_result(
                f"This tool acts as the user through their {connection} connection, and "
                "this request names no verified user; it was not called.",
                "denied",
            )
        if isinstance(found, CredentialRefused):
            return error_result(
                f"This tool acts as the user through their {connection} connection, which "
                f"cannot act for them now ({found.reason}); it was not called.",
                "denied",
            )
        self._ledger.connects.append(found)
        return error_result(
            f"This tool acts as the user through their {connection} connection, which they "
            f"have not made (or which has expired); it was not called. Ask the user to "
            f"connect {connection} at {found.url} and then to ask again.",
            "denied",
        )

    async def _run(
        self, call_id: str, prepared: PreparedCall, deadline: float | None = None
    ) -> Answered:
        ttl = prepared.tool.cache_ttl_s if self._cache is not None else None
        if prepared.bearer is not None:
            ttl = None  # one user's results are never another's
        tenant = self._context.tenant_id
        async with self._semaphore:
            started = time.perf_counter()
            if self._trace is not None:
                prepared = self._traced(call_id, prepared, self._trace)
            try:
                answered = await self._answer(prepared, deadline, ttl, started)
            except BaseException as exc:
                self._failed(call_id, exc)
                raise
        result = answered.result
        if ttl is not None and self._cache is not None and result.ok and not answered.cached:
            await self._cache.put(tenant, prepared, result, ttl)
        return answered

    def _failed(self, call_id: str, exc: BaseException) -> None:
        """The call's span ends with ``exc``; its record (if any) is made without one."""
        span = self._spans.get(call_id)
        if span is not None:
            span.failed(exc)
            self._spans[call_id] = None

    def _traced(self, call_id: str, prepared: PreparedCall, trace: RequestSpan) -> PreparedCall:
        """The call's span opens; the call carries the headers naming it."""
        tool = prepared.tool
        span = trace.tool(tool.name, call_id, tool.label, tool.description)
        self._spans[call_id] = span
        return replace(prepared, trace=span.headers)

    async def _answer(
        self,
        prepared: PreparedCall,
        deadline: float | None,
        ttl: float | None,
        started: float,
    ) -> Answered:
        """The result of the call, as it came: from the cache, else from the tool."""
        if ttl is not None and self._cache is not None:
            cached = await self._cache.get(self._context.tenant_id, prepared)
            if cached is not None:
                return Answered(cached, time.perf_counter() - started, started, cached=True)
        kept = False
        if not self._is_write(prepared.tool):
            result = await self._executor.execute(prepared, deadline)
        elif self._writes is None:
            self._state.unkept_writes = True  # a retry would make it again
            result = await self._executor.execute(prepared, deadline)
        else:
            make = partial(self._executor.execute, prepared, deadline)
            result, kept = await self._writes.once(prepared, make, deadline)
            if self._writes.unkept:
                self._state.unkept_writes = True
            if kept:
                self._state.kept_calls += 1
        return Answered(result, time.perf_counter() - started, started, kept=kept)

    def _record(
        self,
        call_id: str,
        name: str,
        result: ToolResult,
        duration: float,
        cached: bool = False,
        arguments: dict[str, Any] | None = None,
        reused_from: str | None = None,
        kept: bool = False,
        started: float | None = None,
    ) -> None:
        """A call's record (``started``: when it began, if not ``duration`` ago)."""
        record = CallRecord(
            call_id,
            name,
            result.outcome,
            result.status,
            duration,
            cached,
            arguments,
            result.content,
            self._why.get(call_id),
            reused_from,
            kept,
            started if started is not None else time.perf_counter() - duration,
        )
        self.records.append(record)
        if self._trace is not None:
            self._trace_record(record, result, self._trace)
        if self._metrics is not None and reused_from is None and not kept:
            known = self._policy.tool(name)
            tool, source = (name, known.source) if known is not None else (UNKNOWN, NONE)
            tenant = self._context.tenant_id
            self._metrics.tool_calls.labels(tenant, tool, source, result.outcome).inc()
            if duration:
                self._metrics.tool_seconds.labels(tool, source).observe(duration)

    def _trace_record(self, record: CallRecord, result: ToolResult, trace: RequestSpan) -> None:
        """The call's span ends with its record; a call that never ran (refused,
        reused, out of time) has a span of no length. One whose run failed has had
        its span ended already."""
        if record.call_id in self._spans:
            span = self._spans.pop(record.call_id)
            if span is None:
                return
        else:
            known = self._policy.tool(record.name)
            source = known.label if known is not None else NONE
            span = trace.tool(record.name or UNKNOWN, record.call_id, source)
        span.finished(
            record.outcome,
            record.status,
            code=result.code,
            reused=record.reused,
            cached=record.cached,
            why=record.policy,
            arguments=record.redacted_arguments(self._registry) if trace.capture else None,
            result=record.result,
        )
