"""Recent runs (docs/design.md §19): a row for each model request a tenant made — when, which
model, how it ended, its rounds and tool calls, what it cost — kept newest first in a
capped list per tenant, so that any replica lists what every replica answered. The
console's Runs page and ``GET /v1/toolgate/runs`` read it; a run's rounds and tool
calls are its trace (``traces.py``), kept apart for ``traces.ttl_s``.

Kept only while the console is enabled: a row is one more write to the store per
request."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, NamedTuple

import orjson

from gateway.config import ConsoleConfig
from gateway.store import GuardedStore, Keys
from gateway.store.base import settled_now
from tool_registry import immutable

logger = logging.getLogger("gateway.runs")

MAX_READ = 10_000  # rows one listing reads at most, across the tenants it reads
CHUNK = 2500  # rows read at a time past the first page
VERSION = 2  # a stored row: [VERSION, *its fields in order], compact and quick to read
# Version 1 rows (before ``outcome``) are read too: their outcome is "".


class RunRow(NamedTuple):
    """One request, as the runs list shows it (a named tuple: ten thousand are read
    for one page, at a third of a frozen dataclass's cost)."""

    request_id: str
    at: float  # when it began (wall clock, seconds)
    tenant: str
    model: str
    route: str
    status: int
    latency_ms: float
    rounds: int = 0  # of the loop (0: passed through)
    tool_calls: int = 0
    tools: tuple[str, ...] = ()  # the tools it called, each once, in order
    cost_usd: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None
    trace_id: str | None = None  # its OpenTelemetry trace, when traced
    outcome: str = ""  # ``engine.report.RunOutcome``, or "" (a row of version 1)

    def encode(self) -> bytes:
        return orjson.dumps([VERSION, *self])

    def public(self) -> dict[str, Any]:
        return {"object": "toolgate.run", **self._asdict(), "tools": list(self.tools)}

    @classmethod
    def decode(cls, values: Any) -> RunRow | None:
        """A stored row, or None where it is not one (another version's, damaged)."""
        if type(values) is not list:
            return None
        if len(values) == _STORED - 1 and values[0] == 1:
            values.append("")  # before outcomes were kept
        elif len(values) != _STORED or values[0] != VERSION:
            return None
        request_id, status, tools = values[1], values[_STATUS], values[_TOOLS]
        if type(request_id) is not str or type(status) is not int or type(tools) is not list:
            return None
        values[_TOOLS] = tuple(t for t in tools if type(t) is str)
        return cls(*values[1:])


_STORED = len(RunRow._fields) + 1  # with its version first
_STATUS = RunRow._fields.index("status") + 1
_TOOLS = RunRow._fields.index("tools") + 1


@immutable
class Scanned:
    rows: list[RunRow]  # the newest that the filter admits, newest first, at most the limit
    matched: int  # of the rows read
    read: int  # rows read
    complete: bool  # every list was read to its end


class RunLog:
    """Each tenant's newest runs, ``console.runs_kept`` of them, in the store."""

    def __init__(
        self,
        store: GuardedStore,
        keys: Keys,
        console: Callable[[], ConsoleConfig],
        settled: Callable[[], Awaitable[None]] = settled_now,
    ) -> None:
        self._store = store
        self._settled = settled  # this replica's answered requests' rows, added
        self._keys = keys
        self._console = console  # the configuration in force: a reload may turn it on

    @property
    def keeping(self) -> bool:
        config = self._console()
        return config.enabled and config.runs_kept > 0

    async def add(self, row: RunRow) -> None:
        config = self._console()
        if not config.enabled or config.runs_kept <= 0:
            return
        key = self._keys.runs(row.tenant)  # StoreUnavailable: tried again (Afterwards)
        await self._store.push_capped(key, row.encode(), config.runs_kept, config.runs_ttl_s)

    async def scan(
        self, tenants: Iterable[str], admits: Callable[[RunRow], bool], limit: int
    ) -> Scanned:
        """The newest ``limit`` runs of ``tenants`` that ``admits`` lets through, newest
        first. Each tenant's list is read newest first, a page and then ``CHUNK`` rows
        at a time, until it has given ``limit`` of them or ends; ``MAX_READ`` rows in
        all, shared among the tenants."""
        named = list(tenants)
        if not named:
            return Scanned([], 0, 0, True)
        await self._settled()  # a run is listed once its answer has arrived
        cap = max(1, MAX_READ // len(named))  # each tenant's share of MAX_READ
        found: list[RunRow] = []
        matched = read = 0
        complete = True
        listed: set[tuple[str, str]] = set()  # a row written again by a retry is listed once
        for tenant in named:
            key, skip, mine = self._keys.runs(tenant), 0, 0
            while True:
                asked = min(limit if skip == 0 else CHUNK, cap - skip)
                if asked <= 0:
                    complete = False
                    break
                chunk = await self._store.newest(key, asked, skip)
                skip += len(chunk)
                for row in _decoded(chunk):
                    read += 1
                    if (tenant, row.request_id) in listed:
                        continue
                    listed.add((tenant, row.request_id))
                    if admits(row):
                        matched += 1
                        mine += 1
                        found.append(row)
                if len(chunk) < asked:
                    break
                if mine >= limit:
                    complete = False
                    break
        if len(named) > 1:
            found.sort(key=lambda row: row.at, reverse=True)
        return Scanned(found[:limit], matched, read, complete)

    async def find(self, tenant: str, request_id: str) -> RunRow | None:
        """One of the tenant's kept runs, by its request id (looked for in the stored
        bytes, a chunk at a time: only the row found is read)."""
        await self._settled()
        needle = orjson.dumps(request_id)
        key, skip = self._keys.runs(tenant), 0
        while skip < MAX_READ:
            chunk = await self._store.newest(key, CHUNK, skip)
            for value in chunk:
                if needle in value:
                    row = next(iter(_decoded([value])), None)
                    if row is not None and row.request_id == request_id:
                        return row
            if len(chunk) < CHUNK:
                return None
            skip += len(chunk)
        return None


def _decoded(found: list[bytes]) -> list[RunRow]:
    """Rows from their stored bytes: all at once, or one by one past a damaged one."""
    try:
        listed = orjson.loads(b"[" + b",".join(found) + b"]")
    except orjson.JSONDecodeError:
        listed = []
        for value in found:
            try:
                listed.append(orjson.loads(value))
            except orjson.JSONDecodeError:
                continue
    return [row for values in listed if (row := RunRow.decode(values)) is not None]
