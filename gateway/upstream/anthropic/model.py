"""A Messages server as the engine's model server (docs/design.md §20): one request's
parameters, visible history and tools bound, each round asked with the engine's values
and answered with them. Messages' dicts go no further than this folder."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from gateway.config import UpstreamConfig
from gateway.upstream.anthropic.codec import (
    DEFAULT_MAX_TOKENS,
    StreamAssembler,
    Turn,
    cached,
    declare,
    hidden_turns,
    joined,
    parameters,
    parse_message,
    system_and_turns,
    tool_choice,
)
from gateway.upstream.rounds import genai_messages, round_tool_choice, with_hidden
from gateway.values import (
    ChoiceDelta,
    Completion,
    CompletionRequest,
    Message,
    Parameters,
    ToolDefinition,
)
from tool_registry import dumps

Trace = Mapping[str, str] | None
Declare = Callable[[tuple[ToolDefinition, ...]], list[Any]]


class MessagesClient(Protocol):
    """What a Messages model is sent through: ``AnthropicClient``, or a fake."""

    async def message(
        self, upstream: UpstreamConfig, body: dict[str, Any], trace: Trace = None
    ) -> dict[str, Any]: ...

    def message_stream(
        self, upstream: UpstreamConfig, body: dict[str, Any], trace: Trace = None
    ) -> AsyncGenerator[dict[str, Any], None]: ...


class MessagesModel:
    """One request's model server over Anthropic Messages.

    The server's tools (declared already) then the client's own are offered; the last
    round keeps them declared and says ``tool_choice: none``, as a history with
    ``tool_use`` blocks needs its tools. ``tool_choice`` follows docs/design.md §6 round
    by round; a round whose server tools a search chose offers those.
    """

    __slots__ = (
        "_choice",
        "_client",
        "_client_names",
        "_client_tools",
        "_declare",
        "_declared_client",
        "_history",
        "_max_tokens",
        "_parallel",
        "_params",
        "_prompt_bytes",
        "_system",
        "_tools",
        "_visible",
        "client_max_tokens",
        "name",
        "upstream",
    )

    def __init__(
        self,
        client: MessagesClient,
        upstream: UpstreamConfig,
        params: Parameters,
        history: Sequence[Message],
        model: str,
        declared: list[dict[str, Any]],
        client_tools: Sequence[ToolDefinition],
        client_names: frozenset[str],
        declare: Declare,
        answer_tokens: int | None = None,
    ) -> None:
        self._client = client
        self.upstream = upstream
        self.name = upstream.name
        self._history = history
        self._visible: list[Turn] | None = None
        self._system: list[dict[str, Any]] = []
        self._choice = params.tool_choice
        self._parallel = params.parallel_tool_calls
        self._params = parameters(params)
        self._params["model"] = model
        self.client_max_tokens = params.answer_bound
        self._max_tokens = self.client_max_tokens or answer_tokens or DEFAULT_MAX_TOKENS
        self._client_tools = client_tools
        self._client_names = client_names
        self._tools = declared
        self._declare = declare
        self._declared_client: list[dict[str, Any]] = []
        self._prompt_bytes: int | None = None

    def prepare(self) -> list[Turn]:
        """The system blocks, the visible turns and the tools, encoded once."""
        if self._visible is None:
            if self._client_tools:
                self._declared_client = [declare(tool) for tool in self._client_tools]
                self._tools = [*self._tools, *self._declared_client]
            self._system, self._visible = system_and_turns(self._history)
            if self.upstream.cache_prompt:
                self._system = cached(self._system)
        return self._visible

    def prompt_bytes(self) -> int:
        if self._prompt_bytes is None:
            visible = len(dumps(self.prepare())) + len(dumps(self._system))
            self._prompt_bytes = visible + (len(dumps(self._tools)) if self._tools else 0)
        return self._prompt_bytes

    @property
    def model(self) -> str:
        return str(self._params["model"])

    @property
    def base_url(self) -> str:
        return self.upstream.base_url

    def transcript(self, ask: CompletionRequest) -> Iterator[dict[str, Any]]:
        return genai_messages(with_hidden(self._history, ask.hidden))

    def body(self, ask: CompletionRequest, stream: bool) -> dict[str, Any]:
        """The request of one round."""
        visible = self.prepare()
        turns = joined(visible, hidden_turns(ask.hidden)) if ask.hidden else visible
        body = {**self._params, "max_tokens": ask.max_tokens or self._max_tokens}
        body["messages"] = turns
        if self._system:
            body["system"] = self._system
        tools = self._tools
        if ask.tools is not None:
            tools = [*self._declare(ask.tools), *self._declared_client]
        if self.upstream.cache_prompt:
            tools = cached(tools)
        choice = round_tool_choice(self._choice, ask.first, ask.final, self._client_names)
        if tools:
            body["tools"] = tools
            encoded = tool_choice(choice, self._parallel)
            if encoded is not None:
                body["tool_choice"] = encoded
        if stream:
            body["stream"] = True
        return body

    async def answer(self, ask: CompletionRequest) -> Completion:
        answer = await self._client.message(self.upstream, self.body(ask, False), ask.trace)
        return parse_message(answer, self.name)

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
