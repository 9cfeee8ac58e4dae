"""What operators did, for an auditor (docs/design.md §19): console sign-ins (and the
refused ones), sign-outs, every approval decision (the console's and the JSON
route's), reloads, probes and replays — who, when, from where, about what. Each entry
is one line on the ``toolgate.audit`` logger, its fields under ``audit`` (for the log
pipeline, kept as long as the logs are), and one of the newest ``KEPT`` in the store
for the console's Audit page, for ``TTL_S`` after the last. No key and no session token
is ever written: a key is named (``operator:alice``) or shown by its digest's first
digits."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict

from gateway.errors import StoreUnavailable
from gateway.store.guard import GuardedStore
from gateway.store.keys import Keys
from tool_registry import FIELDS, dumps, immutable, loads_object

logger = logging.getLogger("toolgate.audit")

KEPT = 10_000
TTL_S = 90 * 86400.0
MAX_DETAIL = 500


@immutable
class AuditEntry:
    at: float  # epoch seconds
    who: str  # ``operator:admin``, ``operator:<name>``, or ``unknown key``
    what: str  # ``sign-in``, ``sign-in refused``, ``sign-out``, ``approved``, ``denied``, …
    tenant: str = ""
    detail: str = ""  # the tool and approval, a reason, what a reload said
    address: str = ""  # where the browser or client was


class AuditLog:
    def __init__(self, store: GuardedStore, keys: Keys) -> None:
        self._store = store
        self._key = keys.audit()

    async def write(
        self, who: str, what: str, tenant: str = "", detail: str = "", address: str = ""
    ) -> None:
        entry = AuditEntry(time.time(), who, what, tenant, detail[:MAX_DETAIL], address)
        logger.info("%s: %s", who, what, extra={FIELDS: {"audit": asdict(entry)}})
        try:
            await self._store.push_capped(self._key, dumps(asdict(entry)), KEPT, TTL_S)
        except StoreUnavailable:  # the log line stands; the page misses this one
            logger.warning("audit entry not kept in the store: store unavailable")

    async def newest(self, count: int, skip: int = 0) -> list[AuditEntry]:
        found = []
        for raw in await self._store.newest(self._key, count, skip):
            said = loads_object(raw)
            if said is None:
                continue
            try:
                found.append(AuditEntry(**said))
            except TypeError:  # another version's shape
                continue
        return found
