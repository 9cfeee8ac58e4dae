"""The one owner of a run request's end (docs/design.md §10).

``RequestEnd`` is entered before a request's loops run and left once its answer (or
its stream) is done, however it ended. Leaving it ends the run with one frozen
``RunReport`` and hands that report, in order, to everything that follows a run: the
surface (a Responses answer kept), the rate limits' meter, the budget's settlement,
and the exchange (the answer's headers; the log line, metrics, trace, span and
recording read it there). Nothing after the run reads the engine's live state.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import TracebackType

import anyio

from gateway.engine.loop import Run
from gateway.engine.report import RunReport, report_of
from gateway.errors import expected, settle
from gateway.surfaces.forward import Meter
from gateway.surfaces.http import Exchange

Ended = Callable[[RunReport], Awaitable[None]]  # the surface's part of the end


class RequestEnd:
    """Ends a request's runs: ``finish`` when they ended by themselves (the report an
    answer is rendered from), leaving the block otherwise (failed, cancelled)."""

    def __init__(
        self,
        runs: list[Run],
        exchange: Exchange,
        ended: Ended | None,
        meter: Meter | None = None,
    ) -> None:
        self._runs = runs
        self._exchange = exchange
        self._ended = ended
        self._meter = meter
        self._budget = runs[0].ledger.budget  # the request's runs share one
        self._report: RunReport | None = None
        self._failure: BaseException | None = None

    async def __aenter__(self) -> RequestEnd:
        return self

    def finish(self) -> RunReport:
        """The runs ended by themselves: their report."""
        if self._report is None:
            self._report = report_of(self._runs, self._failure)
        return self._report

    def failed(self, exc: BaseException) -> None:
        """The runs failed, and the failure was answered (written into a stream that
        had started) rather than raised."""
        self._failure = exc

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        report = self._report
        if report is None or exc is not None:
            report = report_of(self._runs, exc if exc is not None else self._failure)
        self._exchange.report = report
        if report.ending in ("failed", "cancelled"):
            self._exchange.headers |= report.budget_headers  # what the run spent, said
        try:
            if self._ended is not None or self._meter is not None or self._budget is not None:
                with anyio.CancelScope(shield=True):  # nothing else to wait for: no shield
                    await self._follow(report)
        finally:
            # The report holds the failure as a value now: its traceback (every frame
            # the run passed, with the request's history) is let go — but for an error
            # nothing expected, still on its way to the boundary, which logs it with its
            # traceback first, then lets it go.
            for failure in (exc, self._failure):
                if failure is not None and (failure is self._failure or expected(failure)):
                    settle(failure)

    async def _follow(self, report: RunReport) -> None:
        """What follows the run, in order, each whatever the one before did."""
        try:
            if self._ended is not None:
                await self._ended(report)
        finally:
            if self._meter is not None:
                await self._meter(report.usage)
            if self._budget is not None:
                await self._budget.close()
