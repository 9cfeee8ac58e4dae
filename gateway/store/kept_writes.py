"""Write results kept for a request's retries (docs/design.md §16), in the store so that a
retry on any replica finds them.

Each write call of a request with a ``WriteScope`` has one key (the scope and the
call's name and canonical arguments) holding its state:

- ``running``: claimed by an attempt (under a key, or on an SDK's retry) until
  ``until`` (the claimer's deadline): another attempt waits for it;
- ``done``: its result, which a retry gets instead of calling the tool again;
- ``unknown``: the attempt that made it ended before its result came (cancelled, or
  its replica stopped): a retry is told so and does not make it again.

A write is never made twice under one scope; one whose outcome is unknown is not made
again (the model reads why). The results are the executor's, redacted of configured
secrets like every result. When the store cannot keep a result the request says so
(``unkept``), and a failure after the write tells the SDK not to retry.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio

from gateway.errors import IdempotencyKeyReused
from gateway.store import GuardedStore, Keys, StoreUnavailable
from tool_registry import PreparedCall, ToolResult, dumps, error_result, loads_object

logger = logging.getLogger("gateway.kept_writes")

UNKNOWN = (
    "An earlier attempt of this same request started this call and ended before its "
    "result came back, so whether it took effect is unknown. It was not made again, so "
    "that it cannot happen twice: tell the user to check."
)
_POLL_FIRST_S = 0.02
_POLL_CAP_S = 0.5
_GRACE_S = 5.0  # past a claimer's deadline before its claim is taken as lost


class WriteScope:
    """One request's identity across its attempts. The body's digest is worked out
    when first needed (at the request's first write), not for every request."""

    __slots__ = ("_body", "_id", "_kind", "_raw", "explicit", "retry", "ttl_s")

    def __init__(self, kind: str, raw: bytes, explicit: bool, retry: bool, ttl_s: float) -> None:
        self._kind = kind  # tenant, caller and the key, or the SDK's mark
        self._raw = raw
        self.explicit = explicit  # an Idempotency-Key: the body is bound to it
        self.retry = retry  # look for what an earlier attempt kept
        self.ttl_s = ttl_s
        self._body: str | None = None
        self._id: str | None = None

    @property
    def body(self) -> str:
        """The digest of the body's bytes."""
        if self._body is None:
            self._body = hashlib.sha256(self._raw).hexdigest()
            self._raw = b""
        return self._body

    @property
    def id(self) -> str:
        """Names the request across its attempts (in store keys)."""
        if self._id is None:
            named = self._kind if self.explicit else f"{self._kind}\0{self.body}"
            self._id = hashlib.sha256(named.encode()).hexdigest()[:32]
        return self._id

    @property
    def claims(self) -> bool:
        """Whether a write is claimed before it is made (so that a concurrent attempt
        waits for it): under a key, and on an SDK's retry; not on a first attempt."""
        return self.explicit or self.retry


def _result(saved: dict[str, Any]) -> ToolResult | None:
    """A kept state as the result a retry gets (None: still running)."""
    state = saved.get("state")
    if state == "done":
        content = saved.get("content")
        outcome = saved.get("outcome")
        status = saved.get("status")
        return ToolResult(
            content if isinstance(content, str) else "",
            outcome if outcome in ("ok", "http_error", "timeout") else "ok",
            status if isinstance(status, int) else None,
        )
    until = saved.get("until")
    if state == "running" and isinstance(until, int | float) and time.time() < until:
        return None  # still being made: wait for it
    return error_result(UNKNOWN, "http_error")


class KeptWrites:
    """One store's kept write results (per gateway)."""

    def __init__(self, store: GuardedStore, keys: Keys) -> None:
        self._store = store
        self._keys = keys

    async def bind_body(self, tenant: str, scope: WriteScope) -> None:
        """An Idempotency-Key belongs to the first body sent with it: another body
        under it is a 422 (as Stripe answers). A store that is down binds nothing."""
        if not scope.explicit:
            return
        key = self._keys.kept_body(tenant, scope.id)
        try:
            if await self._store.put_new(key, scope.body.encode(), scope.ttl_s):
                return
            first = await self._store.get(key)
        except StoreUnavailable:
            return
        if first is not None and first.decode() != scope.body:
            raise IdempotencyKeyReused(
                "This Idempotency-Key was used with another request body: a key names one "
                "request. Use a new key for a new request.",
                param="idempotency-key",
            )

    def of(self, tenant: str, scope: WriteScope) -> RequestWrites:
        return RequestWrites(self._store, self._keys, tenant, scope)


class RequestWrites:
    """One request's write scope, as its tool runner uses it."""

    __slots__ = ("_keys", "_store", "_tenant", "scope", "unkept")

    def __init__(self, store: GuardedStore, keys: Keys, tenant: str, scope: WriteScope) -> None:
        self._store = store
        self._keys = keys
        self._tenant = tenant
        self.scope = scope
        self.unkept = False  # a write's result could not be kept (the store was down)

    def _key(self, call: PreparedCall) -> str:
        return self._keys.kept_write(self._tenant, self.scope.id, call.key)

    async def kept(self, calls: Sequence[PreparedCall]) -> dict[str, ToolResult]:
        """What an earlier attempt kept for these calls, by call key (a retry's look
        before its calls are judged: an approved call is not asked again)."""
        if not self.scope.retry or not calls:
            return {}
        try:
            found = await self._store.get_many([self._key(c) for c in calls])
        except StoreUnavailable:
            return {}
        kept: dict[str, ToolResult] = {}
        for call, value in zip(calls, found, strict=True):
            saved = loads_object(value) if value is not None else None
            result = _result(saved) if saved is not None else None
            if result is not None:
                kept[call.key] = result
        return kept

    async def once(
        self, call: PreparedCall, make: Callable[[], Awaitable[ToolResult]], deadline: float | None
    ) -> tuple[ToolResult, bool]:
        """The call's result, made at most once under the scope: ``(result, kept)``,
        ``kept`` when an earlier or concurrent attempt made it."""
        key, ttl_s = self._key(call), self.scope.ttl_s
        clock = asyncio.get_running_loop()
        left = (deadline - clock.time()) if deadline is not None else 3600.0
        claim = dumps({"state": "running", "until": time.time() + left + _GRACE_S})
        try:
            if self.scope.claims:
                if not await self._store.put_new(key, claim, ttl_s):
                    return await self._wait(key, deadline), True
            else:  # a first attempt: marks what it makes (a retry racing it waits)
                await self._store.put(key, claim, ttl_s)
        except StoreUnavailable:
            self.unkept = True
        try:
            result = await make()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._keep(key, {"state": "unknown"})
            raise
        saved = {
            "state": "done",
            "content": result.content,
            "outcome": result.outcome,
            "status": result.status,
        }
        await self._keep(key, saved)
        return result, False

    async def _keep(self, key: str, saved: dict[str, Any]) -> None:
        try:
            await self._store.put(key, dumps(saved), self.scope.ttl_s)
        except StoreUnavailable:
            self.unkept = True
            logger.warning("a write's result could not be kept for retries: store unavailable")

    async def _wait(self, key: str, deadline: float | None) -> ToolResult:
        """Another attempt claimed the call: its result once it has one. Reaching the
        request's deadline raises ``TimeoutError``, as a tool's would."""
        delay = _POLL_FIRST_S
        clock = asyncio.get_running_loop()
        while True:
            try:
                value = await self._store.get(key)
            except StoreUnavailable:
                value = None
            saved = loads_object(value) if value is not None else None
            if saved is None:
                return error_result(UNKNOWN, "http_error")  # gone: expired, or the store
            result = _result(saved)
            if result is not None:
                return result
            if deadline is not None and clock.time() + delay >= deadline:
                raise TimeoutError
            await asyncio.sleep(delay)
            delay = min(delay * 2, _POLL_CAP_S)
