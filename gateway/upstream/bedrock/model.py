"""A Bedrock Converse model as the engine's model server (docs/design.md §20): one
request's parameters, visible history and tools bound, each round asked with the
engine's values and answered with them. Converse's dicts go no further than this
folder."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from gateway.config import UpstreamConfig
from gateway.upstream.bedrock.codec import (
    DEFAULT_MAX_TOKENS,
    StreamAssembler,
    Turn,
    cached,
    declare,
    hidden_turns,
    joined,
    parameters,
    parse_answer,
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


class ConverseClient(Protocol):
    """What a Converse model is sent through: ``BedrockClient``, or a fake."""

    async def converse(
        self, upstream: UpstreamConfig, model: str, body: dict[str, Any], trace: Trace = None
    ) -> dict[str, Any]: ...

    def converse_stream(
        self, upstream: UpstreamConfig, model: str, body: dict[str, Any], trace: Trace = None
    ) -> AsyncGenerator[tuple[str, dict[str, Any]], None]: ...


class ConverseModel:
    """One request's model server over Bedrock Converse.

    Tools go under ``toolConfig``, the server's (declared already) then the client's
    own; the last round keeps them declared (a history with ``toolUse`` blocks needs
    them) and names no ``toolChoice``, as Converse has no ``none``: a call it still
    makes is dropped, as on every dialect's last round.
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
        "_model",
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
        client: ConverseClient,
        upstream: UpstreamConfig,
        params: Parameters,
        history: Sequence[Message],
        model: str,
        declared: list[dict[str, Any]],
        client_tools: Sequence[ToolDefinition],
        client_names: frozenset[str],
        declare_each: Declare,
        answer_tokens: int | None = None,
    ) -> None:
        self._client = client
        self.upstream = upstream
        self.name = upstream.name
        self._model = model
        self._history = history
        self._visible: list[Turn] | None = None
        self._system: list[dict[str, Any]] = []
        self._choice = params.tool_choice
        self.client_max_tokens = params.answer_bound
        self._max_tokens = self.client_max_tokens or answer_tokens or DEFAULT_MAX_TOKENS
        self._params = parameters(params, self._max_tokens)
        self._client_tools = client_tools
        self._client_names = client_names
        self._tools = declared
        self._declare = declare_each
        self._declared_client: list[dict[str, Any]] = []
        self._prompt_bytes: int | None = None

    def prepare(self) -> list[Turn]:
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
        return self._model

    @property
    def base_url(self) -> str:
        return self.upstream.base_url

    def transcript(self, ask: CompletionRequest) -> Iterator[dict[str, Any]]:
        return genai_messages(with_hidden(self._history, ask.hidden))

    def body(self, ask: CompletionRequest) -> dict[str, Any]:
        """The request of one round (its model is in its path)."""
        visible = self.prepare()
        turns = joined(visible, hidden_turns(ask.hidden)) if ask.hidden else visible
        body = dict(self._params)
        if ask.max_tokens is not None:
            body["inferenceConfig"] = {**body["inferenceConfig"], "maxTokens": ask.max_tokens}
        body["messages"] = turns
        if self._system:
            body["system"] = self._system
        tools = self._tools
        if ask.tools is not None:
            tools = [*self._declare(ask.tools), *self._declared_client]
        if tools and self.upstream.cache_prompt:
            tools = cached(tools)
        if tools:
            config: dict[str, Any] = {"tools": tools}
            choice = round_tool_choice(self._choice, ask.first, ask.final, self._client_names)
            encoded = tool_choice(choice) if not ask.final else None
            if encoded is not None:
                config["toolChoice"] = encoded
            body["toolConfig"] = config
        return body

    async def answer(self, ask: CompletionRequest) -> Completion:
        answer = await self._client.converse(self.upstream, self._model, self.body(ask), ask.trace)
        return parse_answer(answer, self.name)

    async def stream(self, ask: CompletionRequest) -> AsyncIterator[ChoiceDelta | Completion]:
        assembler = StreamAssembler(self.name)
        events = self._client.converse_stream(self.upstream, self._model, self.body(ask), ask.trace)
        try:
            async for kind, payload in events:
                for piece in assembler.add(kind, payload):
                    yield piece
                if assembler.ended:
                    break
        finally:
            await events.aclose()
        yield assembler.round()
