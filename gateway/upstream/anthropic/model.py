"""A Messages server as the engine's model server (docs/design.md §20): one request's
parameters, visible history and tools bound (``turn_model.TurnModel``), each round asked
with the engine's values and answered with them. Messages' dicts go no further than
this folder."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from typing import Any, Protocol, TypeVar

from gateway.config import UpstreamConfig
from gateway.upstream.anthropic.codec import (
    BLOCKS,
    StreamAssembler,
    cached,
    declare,
    parameters,
    parse_message,
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


class MessagesClient(Protocol):
    """What a Messages model is sent through: ``AnthropicClient``, or a fake."""

    async def message(
        self,
        upstream: UpstreamConfig,
        body: dict[str, Any],
        read: Callable[[dict[str, Any]], T],
        trace: Trace = None,
    ) -> T: ...

    def message_stream(
        self, upstream: UpstreamConfig, body: dict[str, Any], trace: Trace = None
    ) -> AsyncGenerator[dict[str, Any], None]: ...


class MessagesModel(TurnModel):
    """One request's model server over Anthropic Messages. The last round keeps the
    tools declared and says ``tool_choice: none``, as a history with ``tool_use`` blocks
    needs its tools."""

    __slots__ = ("_client", "_parallel", "_params")

    def __init__(self, client: MessagesClient, ask: ModelAsk, declarations: Declarations) -> None:
        super().__init__(BLOCKS, ask, declarations, declare, cached)
        self._client = client
        self._parallel = ask.params.parallel_tool_calls
        self._params = {**parameters(ask.params, ask.upstream.sampling), "model": ask.model}

    def body(self, ask: CompletionRequest, stream: bool) -> dict[str, Any]:
        """The request of one round."""
        body = {**self._params, "max_tokens": ask.max_tokens or self.max_tokens}
        body["messages"] = self.turns(ask)
        system = self.system()
        if system:
            body["system"] = system
        tools = self.tools(ask)
        if tools:
            body["tools"] = tools
            encoded = tool_choice(self.choice(ask), self._parallel)
            if encoded is not None:
                body["tool_choice"] = encoded
        if stream:
            body["stream"] = True
        return body

    def _read(self, whole: dict[str, Any]) -> Completion:
        """A whole answer as the round's values (in a worker thread when it is large)."""
        return parse_message(whole, self.name)

    async def answer(self, ask: CompletionRequest) -> Completion:
        return await self._client.message(
            self.upstream, self.body(ask, False), self._read, ask.trace
        )

    async def stream(self, ask: CompletionRequest) -> AsyncIterator[ChoiceDelta | Completion]:
        """The round's text as it comes, then the round it made up."""
        assembler = StreamAssembler(self.name)
        events = self._client.message_stream(self.upstream, self.body(ask, True), ask.trace)
        try:
            async for event in events:
                for piece in assembler.add(event):
                    yield piece
                if assembler.ended:
                    break
        finally:
            await events.aclose()
        yield assembler.round()
