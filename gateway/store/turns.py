"""Saved tool turns (DESIGN.md §6): when a request hands client calls back, every hidden
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
from dataclasses import dataclass
from typing import Any

from gateway.ops.metrics import Metrics
from gateway.ops.offload import offload
from gateway.store import GuardedStore, Keys, StoreUnavailable
from gateway.upstream import dialect
from gateway.values import Hidden, KeepTurn, ToolCall, ToolOutput, Turn
from tool_registry import canonical, dumps, loads_object

logger = logging.getLogger("gateway.turns")

_MARK_TTL_FACTOR = 24  # "there was a hidden turn here" outlives the turn itself
_MANY_MESSAGES = 1000  # digesting more (about 2 µs each) is done off the event loop


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def _visible(message: dict[str, Any]) -> list[Any]:
    """What identifies a message however a client re-serialises it: its role, its text,
    its tool call ids, the call it answers."""
    calls = message.get("tool_calls")
    ids = [c.get("id") for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []
    return [message.get("role"), _text(message.get("content")), ids, message.get("tool_call_id")]


def prefix_digests(messages: list[dict[str, Any]], identity: str) -> list[str]:
    """``digests[i]`` binds ``messages[:i]`` to ``identity`` (``len(messages) + 1`` of them)."""
    running = hashlib.sha256(identity.encode() + b"\0")
    digests = [running.hexdigest()]
    for message in messages:
        running.update(canonical(_visible(message)).encode() + b"\0")
        digests.append(running.hexdigest())
    return digests


@dataclass(frozen=True, slots=True)
class Restored:
    """A history with its hidden turns put back, and the first taint they carried."""

    messages: list[dict[str, Any]]
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
    async def _digests(messages: list[dict[str, Any]], identity: str) -> list[str]:
        """``prefix_digests``: off the event loop for a long conversation."""
        heavy = len(messages) > _MANY_MESSAGES
        return await offload(heavy, prefix_digests, messages, identity)

    async def conversation(self, messages: list[dict[str, Any]], identity: str) -> str:
        """The digest a turn saved after ``messages`` (as the client sent them) is bound to."""
        return (await self._digests(messages, identity))[-1]

    def keeper(self, tenant: str, messages: list[dict[str, Any]], identity: str) -> KeepTurn:
        """How a loop that hands calls back keeps its hidden turns here: bound to
        ``messages`` (the visible history as the client sent it) and to who sent it.
        The binding is digested only if a turn is kept (most requests keep none)."""
        messages = list(messages)  # as they are now, whatever the loop does to the list

        async def keep(
            before: list[Hidden],
            turn: Turn,
            outputs: list[ToolOutput],
            handed: tuple[ToolCall, ...],
            taint: str | None,
        ) -> None:
            await self.save(
                tenant,
                await self.conversation(messages, identity),
                dialect.messages(before),
                dialect.turn_message(turn),
                dialect.messages(outputs),
                [call.id for call in handed],
                taint,
            )

        return keep

    async def save(
        self,
        tenant: str,
        conversation: str,
        before: list[dict[str, Any]],
        assistant: dict[str, Any],
        results: list[dict[str, Any]],
        client_ids: list[str],
        taint: str | None = None,
    ) -> None:
        """Keep the hidden rounds ``before`` the hand-back, its full assistant message
        and the server results of that message, under each client id, with where the
        run first read untrusted words (``taint``), if it had."""
        turn = {"before": before, "assistant": assistant, "results": results, "ids": client_ids}
        if taint is not None:
            turn["taint"] = taint
        value = dumps(turn)
        writes = []
        for call_id in client_ids:
            key = self._keys.turn(tenant, _bound_id(conversation, call_id))
            writes.append(self._store.put(key, value, self._ttl_s))
            writes.append(self._store.put(key + ":mark", b"1", self._ttl_s * _MARK_TTL_FACTOR))
        try:
            await asyncio.gather(*writes)
        except StoreUnavailable:
            logger.warning("hidden turn of tenant %s not saved: store unavailable", tenant)
            return
        self.saved += 1

    def _missed(self) -> None:
        self.misses += 1
        if self._metrics is not None:
            self._metrics.turn_misses.inc()

    async def restore(
        self, tenant: str, messages: list[dict[str, Any]], identity: str
    ) -> Restored | None:
        """The history with every saved hidden turn put back, or None if none applies."""
        calls_at: list[tuple[int, list[str]]] = []
        for index, message in enumerate(messages):
            calls = message.get("tool_calls")
            if message.get("role") != "assistant" or not isinstance(calls, list):
                continue
            ids = [str(c.get("id")) for c in calls if isinstance(c, dict)]
            if ids:
                calls_at.append((index, ids))
        if not calls_at:
            return None
        digests = await self._digests(messages, identity)
        places = [(index, [_bound_id(digests[index], i) for i in ids]) for index, ids in calls_at]
        bound = [bound_id for _, ids in places for bound_id in ids]
        keys = [self._keys.turn(tenant, b) for b in bound]
        try:
            values = await self._store.get_many(keys + [key + ":mark" for key in keys])
        except StoreUnavailable:
            self._missed()
            logger.warning("hidden turns of tenant %s not restored: store unavailable", tenant)
            return None
        turns = dict(zip(bound, values[: len(bound)], strict=True))
        marks = dict(zip(bound, values[len(bound) :], strict=True))
        by_index = dict(places)
        restored: list[dict[str, Any]] = []
        found = False
        taint: str | None = None
        for index, message in enumerate(messages):
            ids = by_index.get(index, [])
            saved = next((turns[i] for i in ids if turns[i] is not None), None)
            turn = loads_object(saved) if saved is not None else None
            if turn is None:
                if any(marks[i] is not None for i in ids):
                    self._missed()
                    logger.info("a hidden turn of tenant %s has expired", tenant)
                restored.append(message)
                continue
            restored.extend(turn.get("before") or [])
            restored.append(turn["assistant"])
            restored.extend(turn["results"])
            found = True
            if taint is None and isinstance(turn.get("taint"), str):
                taint = turn["taint"]
        if not found:
            return None
        self.restored += 1
        return Restored(restored, taint)
