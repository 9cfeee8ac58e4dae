"""The chunks the client receives while a tool loop streams: one id, one ``created``,
the client's model name, exactly one role delta and one ``finish_reason``."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from gateway.chat_json import call_dict
from gateway.errors import GatewayError
from gateway.surfaces.chat.legacy import LEGACY_FINISH, legacy_call
from gateway.surfaces.chat.render import chat_usage
from gateway.upstream.sse import encode, error_event
from gateway.values import ChoiceDelta, ToolCall, UsageCounts


class ChunkWriter:
    """``legacy``: the client speaks the legacy ``functions`` shape, so a handed-back
    call goes as ``function_call`` and ends with ``finish_reason: "function_call"``."""

    __slots__ = ("_created", "_id", "_index", "_legacy", "_model", "_role_sent")

    def __init__(
        self,
        completion_id: str,
        model: str,
        legacy: bool = False,
        index: int = 0,
        created: int | None = None,
    ) -> None:
        self._id = completion_id
        self._model = model
        self._created = int(time.time()) if created is None else created
        self._role_sent = False
        self._legacy = legacy
        self._index = index  # the choice written (a request with ``n`` has several)

    def _chunk(self, choices: list[dict[str, Any]], **extra: Any) -> bytes:
        return encode(
            {
                "id": self._id,
                "object": "chat.completion.chunk",
                "created": self._created,
                "model": self._model,
                "choices": choices,
                **extra,
            }
        )

    def delta(
        self,
        delta: dict[str, Any],
        finish_reason: str | None = None,
        logprobs: dict[str, Any] | None = None,
    ) -> bytes:
        if not self._role_sent:
            delta = {"role": "assistant", **delta}
            self._role_sent = True
        choice = {
            "index": self._index,
            "delta": delta,
            "finish_reason": finish_reason,
            "logprobs": logprobs,
        }
        return self._chunk([choice])

    def tool_calls(self, calls: Sequence[ToolCall]) -> bytes:
        """Client tool calls, each whole in one delta."""
        if self._legacy:
            return self.delta({"function_call": legacy_call(call_dict(calls[0]))})
        pieces = [{"index": index, **call_dict(call)} for index, call in enumerate(calls)]
        return self.delta({"tool_calls": pieces})

    # The writer protocol of ``surfaces.streaming``.

    def open(self) -> list[bytes]:
        return []  # the role goes with the first delta

    def choice_delta(self, delta: ChoiceDelta) -> list[bytes]:
        return [self.delta(delta.delta, logprobs=delta.logprobs)]

    def hand_back(self, calls: Sequence[ToolCall]) -> list[bytes]:
        return [self.tool_calls(calls), self.finish("tool_calls")]

    def final(self, finish_reason: str, stop_sequence: str | None = None) -> list[bytes]:
        return [self.finish(finish_reason)]

    def finish(self, reason: str) -> bytes:
        if self._legacy and reason == "tool_calls":
            reason = LEGACY_FINISH
        return self.delta({}, reason)

    def usage(self, usage: UsageCounts) -> bytes:
        return self._chunk([], usage=chat_usage(usage))

    @staticmethod
    def error(exc: GatewayError) -> bytes:
        return error_event(exc.envelope())
