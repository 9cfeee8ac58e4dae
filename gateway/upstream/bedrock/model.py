"""A Bedrock Converse model as the engine's model server (docs/design.md §20): one
request's parameters, visible history and tools bound (``turn_model.TurnModel``), each
round asked with the engine's values and answered with them. Converse's dicts go no
further than this folder."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from typing import Any, Protocol, TypeVar

from gateway.config import UpstreamConfig
from gateway.upstream.bedrock.codec import (
    BLOCKS,
    StreamAssembler,
    cached,
    declare,
    parameters,
    parse_answer,
    tool_choice,
)
from gateway.upstream.port import ModelAsk
from gateway.upstream.rounds import Declarations
from gateway.upstream.turn_model import TurnModel
from gateway.values import (
    ChoiceDelta,
    Completion,
    CompletionRequest,
)

Trace = Mapping[str, str] | None


T = TypeVar("T")


class ConverseClient(Protocol):
    """What a Converse model is sent through: ``BedrockClient``, or a fake."""

    async def converse(
        self,
        upstream: UpstreamConfig,
        model: str,
        body: dict[str, Any],
        read: Callable[[dict[str, Any]], T],
        trace: Trace = None,
    ) -> T: ...

    def converse_stream(
        self, upstream: UpstreamConfig, model: str, body: dict[str, Any], trace: Trace = None
    ) -> AsyncGenerator[tuple[str, dict[str, Any]], None]: ...


class ConverseModel(TurnModel):
    """One request's model server over Bedrock Converse. The last round keeps the tools
    declared (a history with ``toolUse`` blocks needs them) and names no ``toolChoice``,
    as Converse has no ``none``: a call it still makes is dropped, as on every dialect's
    last round."""

    __slots__ = ("_client", "_params")

    def __init__(self, client: ConverseClient, ask: ModelAsk, declarations: Declarations) -> None:
        super().__init__(BLOCKS, ask, declarations, declare, cached)
        self._client = client
        self._params = parameters(ask.params, self.max_tokens)

    def body(self, ask: CompletionRequest) -> dict[str, Any]:
        """The request of one round (its model is in its path)."""
        body = dict(self._params)
        if ask.max_tokens is not None:
            body["inferenceConfig"] = {**body["inferenceConfig"], "maxTokens": ask.max_tokens}
        body["messages"] = self.turns(ask)
        system = self.system()
        if system:
            body["system"] = system
        tools = self.tools(ask)
        if tools:
            config: dict[str, Any] = {"tools": tools}
            encoded = None if ask.final else tool_choice(self.choice(ask))
            if encoded is not None:
                config["toolChoice"] = encoded
            body["toolConfig"] = config
        return body

    def _read(self, whole: dict[str, Any]) -> Completion:
        """A whole answer as the round's values (in a worker thread when it is large)."""
        return parse_answer(whole, self.name)

    async def answer(self, ask: CompletionRequest) -> Completion:
        return await self._client.converse(
            self.upstream, self.target, self.body(ask), self._read, ask.trace
        )

    async def stream(self, ask: CompletionRequest) -> AsyncIterator[ChoiceDelta | Completion]:
        assembler = StreamAssembler(self.name)
        events = self._client.converse_stream(self.upstream, self.target, self.body(ask), ask.trace)
        try:
            async for kind, payload in events:
                for piece in assembler.add(kind, payload):
                    yield piece
                if assembler.ended:
                    break
        finally:
            await events.aclose()
        yield assembler.round()
