"""Saved tool turns (docs/design.md §6): when a request hands client calls back, every hidden
turn of it (earlier server rounds, and the server calls of the same message with their
results) is kept in the store under the client calls' ids and put back when the client
returns with its results — on any replica.

A saved turn is bound to the conversation it belongs to: its key holds a digest of
the visible messages before it and of the caller's bound identity (the tenant and the
request headers that tools ``bind``). Another conversation, or another user of the same
tenant, presenting the same call id finds nothing. A turn is kept, and put back on
every replay of its conversation, until its TTL: an agent that resends its whole
session each turn (Codex CLI) keeps the model's hidden rounds in every later turn.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from gateway.ops.metrics import Metrics
from gateway.ops.offload import offload
from gateway.store import GuardedStore, Keys, StoreUnavailable
from gateway.store.message_records import RecordUnreadable
from gateway.store.turn_codec import SavedTurn, decode, encode
from gateway.values import AssistantMessage, HiddenItem, KeepTurn, ToolCall, ToolOutput
from tool_registry import canonical, immutable

logger = logging.getLogger("gateway.turns")

_MARK_TTL_FACTOR = 24  # "there was a hidden turn here" outlives the turn itself
_MANY_MESSAGES = 1000  # digesting more (about 2 µs each) is done off the event loop


@immutable
class Seen:
    """One visible message as the turns read it, decoded by its surface: what
    identifies it however a client re-serialises it (its role, its text, its tool call
    ids, the call it answers: ``identity``, as the client sent them), and the ids of
    the tool calls an assistant message makes (``calls``: where a turn may be kept)."""

    identity: tuple[Any, ...]
    calls: tuple[str, ...] = ()


def prefix_digests(history: Sequence[Seen], identity: str) -> list[str]:
    """``digests[i]`` binds ``history[:i]`` to ``identity`` (``len(history) + 1`` of them)."""
    running = hashlib.sha256(identity.encode() + b"\0")
    digests = [running.hexdigest()]
    for seen in history:
        running.update(canonical(list(seen.identity)).encode() + b"\0")
        digests.append(running.hexdigest())
    return digests


@immutable
class Restored:
    """The saved turns that apply to a history, by the index of the message that
    handed calls back, and the first taint they carried."""

    turns: dict[int, SavedTurn]
    taint: str | None


def _bound_id(conversation: str, call_id: str) -> str:
    return hashlib.sha256(f"{conversation}\0{call_id}".encode()).hexdigest()


class TurnStore:
    def __init__(
        self,
        store: GuardedStore,
        keys: Keys,
        ttl_s: float,
        metrics: Metrics | None = None,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._keys = keys
        self._ttl_s = ttl_s
        self.saved = 0
        self.restored = 0
        self.misses = 0  # hidden turns that were gone (expired, or the store was down)

    @staticmethod
    async def _digests(history: Sequence[Seen], identity: str) -> list[str]:
        """``prefix_digests``: off the event loop for a long conversation."""
        heavy = len(history) > _MANY_MESSAGES
        return await offload(heavy, prefix_digests, history, identity)

    async def conversation(self, history: Sequence[Seen], identity: str) -> str:
        """The digest a turn saved after ``history`` (as the client sent it) is bound to."""
        return (await self._digests(history, identity))[-1]

    def keeper(self, tenant: str, history: Callable[[], Sequence[Seen]], identity: str) -> KeepTurn:
        """How a loop that hands calls back keeps its hidden turns here: bound to the
        visible history as the client sent it (``history``, read only if a turn is
        kept: most requests keep none) and to who sent it."""

        async def keep(
            before: list[HiddenItem],
            turn: AssistantMessage,
            outputs: list[ToolOutput],
            handed: tuple[ToolCall, ...],
            taint: str | None,
        ) -> None:
            ids = tuple(call.id for call in handed)
            saved = SavedTurn(tuple(before), turn, tuple(outputs), ids, taint)
            await self.save(tenant, await self.conversation(history(), identity), saved)

        return keep

    async def save(self, tenant: str, conversation: str, saved: SavedTurn) -> None:
        """Keep the hidden rounds before a hand-back, its whole turn and the server
        outputs of that turn, under each client call's id, before the client is handed
        its calls: retried within ``store.keep_retry_s``, and else StoreUnavailable (the
        request fails saying so: its client could not continue it)."""
        value = encode(saved)
        writes = []
        for call_id in saved.ids:
            key = self._keys.saved_turn(tenant, _bound_id(conversation, call_id))
            writes.append(self._store.keep(key, value, self._ttl_s))
            writes.append(self._store.keep(key + ":mark", b"1", self._ttl_s * _MARK_TTL_FACTOR))
        try:
            await asyncio.gather(*writes)
        except StoreUnavailable as exc:
            logger.warning("hidden turn of tenant %s not saved: store unavailable", tenant)
            raise StoreUnavailable(
                "The shared store is unavailable: this answer's hidden tool rounds could "
                "not be kept for its continuation, so it is not given."
            ) from exc
        self.saved += 1

    def _missed(self) -> None:
        self.misses += 1
        if self._metrics is not None:
            self._metrics.turn_misses.inc()

    def _keys_of(self, tenant: str, bound: list[str]) -> list[str]:
        """Where the turns bound as ``bound`` may be: each under today's key, then
        under the key version 1 wrote (read until what it wrote has expired), then
        the marks of both."""
        keys = [self._keys.saved_turn(tenant, b) for b in bound]
        old = [self._keys.turn(tenant, b) for b in bound]
        return [*keys, *old, *(key + ":mark" for key in keys), *(key + ":mark" for key in old)]

    async def restore(self, tenant: str, history: Sequence[Seen], identity: str) -> Restored | None:
        """Every saved turn that applies to ``history``, or None if none does."""
        calls_at = [(index, seen.calls) for index, seen in enumerate(history) if seen.calls]
        if not calls_at:
            return None
        digests = await self._digests(history, identity)
        places = [(index, [_bound_id(digests[index], i) for i in ids]) for index, ids in calls_at]
        bound = [bound_id for _, ids in places for bound_id in ids]
        try:
            values = await self._store.get_many(self._keys_of(tenant, bound))
        except StoreUnavailable:
            self._missed()
            logger.warning("hidden turns of tenant %s not restored: store unavailable", tenant)
            return None
        n = len(bound)
        turns = {
            b: values[i] if values[i] is not None else values[n + i] for i, b in enumerate(bound)
        }
        marks = {
            b: values[2 * n + i] is not None or values[3 * n + i] is not None
            for i, b in enumerate(bound)
        }
        found: dict[int, SavedTurn] = {}
        taint: str | None = None
        for index, ids in places:
            saved = self._read(tenant, next((turns[i] for i in ids if turns[i] is not None), None))
            if saved is None:
                if any(marks[i] for i in ids):
                    self._missed()
                    logger.info("a hidden turn of tenant %s has expired", tenant)
                continue
            found[index] = saved
            taint = taint or saved.taint
        if not found:
            return None
        self.restored += 1
        return Restored(found, taint)

    @staticmethod
    def _read(tenant: str, value: bytes | None) -> SavedTurn | None:
        if value is None:
            return None
        try:
            return decode(value)
        except RecordUnreadable as exc:
            logger.warning("a hidden turn of tenant %s could not be read: %s", tenant, exc)
            return None
