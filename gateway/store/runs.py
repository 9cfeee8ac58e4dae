"""Recent runs (DESIGN.md §19): a row for each model request a tenant made — when, which
model, how it ended, its rounds and tool calls, what it cost — kept newest first in a
capped list per tenant, so that any replica lists what every replica answered. The
console's Runs page and ``GET /v1/toolgate/runs`` read it; a run's rounds and tool
calls are its trace (``traces.py``), kept apart for ``traces.ttl_s``.

Kept only while the console is enabled: a row is one more write to the store per
request."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import orjson

from gateway.config import ConsoleConfig
from gateway.store import GuardedStore, Keys, StoreUnavailable

logger = logging.getLogger("gateway.runs")

MAX_READ = 10_000  # rows one listing reads, across the tenants it reads


@dataclass(frozen=True, slots=True)
class RunRow:
    """One request, as the runs list shows it."""

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

    def encode(self) -> bytes:
        return orjson.dumps(asdict(self))

    def public(self) -> dict[str, Any]:
        return {"object": "toolgate.run", **asdict(self), "tools": list(self.tools)}

    @classmethod
    def decode(cls, data: Mapping[str, Any]) -> RunRow | None:
        """A stored row, or None where it is not one (another version's, damaged)."""
        try:
            row = cls(**{**data, "tools": tuple(data.get("tools") or ())})
        except TypeError:
            return None
        if not isinstance(row.request_id, str) or not isinstance(row.at, int | float):
            return None
        return row


class RunLog:
    """Each tenant's newest runs, ``console.runs_kept`` of them, in the store."""

    def __init__(
        self, store: GuardedStore, keys: Keys, console: Callable[[], ConsoleConfig]
    ) -> None:
        self._store = store
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
        key = self._keys.runs(row.tenant)
        try:
            await self._store.push_capped(key, row.encode(), config.runs_kept, config.runs_ttl_s)
        except StoreUnavailable:
            logger.warning("run %s not listed: store unavailable", row.request_id)

    async def newest(self, tenants: Iterable[str]) -> list[RunRow]:
        """The newest runs of ``tenants``, newest first: every kept row of one tenant,
        and of several, ``MAX_READ`` shared among them."""
        named = list(tenants)
        if not named:
            return []
        each = max(100, MAX_READ // len(named))
        rows: list[RunRow] = []
        for tenant in named:
            found = await self._store.newest(self._keys.runs(tenant), each)
            if not found:
                continue
            rows.extend(_decoded(found))
        if len(named) > 1:
            rows.sort(key=lambda row: row.at, reverse=True)
        return rows

    async def find(self, tenant: str, request_id: str) -> RunRow | None:
        """One of the tenant's kept runs, by its request id."""
        for row in await self.newest([tenant]):
            if row.request_id == request_id:
                return row
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
    return [row for data in listed if isinstance(data, dict) and (row := RunRow.decode(data))]
