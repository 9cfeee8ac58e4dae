"""Call ids a client never echoes (docs/design.md §20): Ollama's clients send a tool call
back as its name and arguments, with no id, and answer it by the tool's name. For them,
each call the model makes is named by an id derived from what the client will echo —
its name, its arguments as one canonical JSON object, its place among its turn's calls
of that name (a client sees only the calls handed back to it, never the server's) — so
that the turn the gateway keeps and the turn the client answers meet again (on any
replica). The model server reads the same ids in the rounds that follow."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import replace
from typing import Any

from gateway.upstream.port import OpenedServer
from gateway.values import ChoiceDelta, Completion, CompletionRequest, ToolCall
from tool_registry import canonical, loads_object


def echoed_arguments(arguments: str) -> dict[str, Any]:
    """A call's arguments as a client that reads them as an object gets them: the JSON
    object the model wrote, else none."""
    return (loads_object(arguments) or {}) if arguments.strip() else {}


def stable_id(name: str | None, arguments: dict[str, Any], index: int) -> str:
    """The id of a turn's ``index``-th call of ``name``, from what its client echoes."""
    seed = f"{name or ''}\0{canonical(arguments)}\0{index}".encode()
    return f"call_{hashlib.sha256(seed).hexdigest()[:24]}"


def renamed(calls: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    seen: dict[str | None, int] = {}
    named = []
    for call in calls:
        index = seen[call.name] = seen.get(call.name, -1) + 1
        named.append(
            replace(call, id=stable_id(call.name, echoed_arguments(call.arguments), index))
        )
    return tuple(named)


class StableCallIds:
    """A model server whose answers' calls carry stable ids (``stable_id``)."""

    def __init__(self, inner: OpenedServer) -> None:
        self._inner = inner
        self.name = inner.name
        self.client_max_tokens = inner.client_max_tokens

    @property
    def model(self) -> str:
        return self._inner.model

    @property
    def base_url(self) -> str:
        return self._inner.base_url

    def prepare(self) -> object:
        return self._inner.prepare()

    def prompt_bytes(self) -> int:
        return self._inner.prompt_bytes()

    def transcript(self, ask: CompletionRequest) -> Iterable[dict[str, Any]]:
        return self._inner.transcript(ask)

    @staticmethod
    def _stable(answer: Completion) -> Completion:
        if not answer.turn.calls:
            return answer
        return replace(answer, turn=replace(answer.turn, calls=renamed(answer.turn.calls)))

    async def answer(self, ask: CompletionRequest) -> Completion:
        return self._stable(await self._inner.answer(ask))

    async def stream(self, ask: CompletionRequest) -> AsyncIterator[ChoiceDelta | Completion]:
        async for piece in self._inner.stream(ask):
            yield self._stable(piece) if isinstance(piece, Completion) else piece
