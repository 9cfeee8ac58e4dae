"""A chat-completions server as the engine's model server: one request's parameters,
visible history and tools bound, each round asked with the engine's values
(``CompletionRequest``) and answered with them (``Completion``, or ``ChoiceDelta``s then
the ``Completion`` when streamed). The dialect's dicts go no further than its folder."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping
from typing import Any, Protocol, TypeVar

from gateway.chat_json import (
    encode_messages,
    encode_parameters,
    encode_tool_choice,
    encode_tools,
    messages,
)
from gateway.config import UpstreamConfig
from gateway.errors import UpstreamError
from gateway.upstream.openai.codec import RoundAssembler, parse_completion, round_body
from gateway.upstream.openai.tool_media import tool_media_moved
from gateway.upstream.port import ModelAsk
from gateway.upstream.rounds import Declarations, genai_messages, round_tool_choice, with_hidden
from gateway.values import (
    ChoiceDelta,
    Completion,
    CompletionRequest,
    ToolDefinition,
)
from tool_registry import dumps

Trace = Mapping[str, str] | None  # W3C headers naming the span a request belongs to
# Server tools in the dialect, for the sets a search chooses round by round.
Declare = Callable[[tuple[ToolDefinition, ...]], list[dict[str, Any]]]


T = TypeVar("T")


class ChatClient(Protocol):
    """What a chat model is sent through: ``UpstreamClient``, or a scripted fake."""

    async def chat(
        self,
        upstream: UpstreamConfig,
        body: dict[str, Any],
        read: Callable[[dict[str, Any]], T],
        trace: Trace = None,
    ) -> T: ...

    def chat_stream(
        self, upstream: UpstreamConfig, body: dict[str, Any], trace: Trace = None
    ) -> AsyncGenerator[dict[str, Any], None]: ...


class ChatModel:
    """One request's model server over the chat-completions dialect.

    ``params`` are the client's request parameters, ``history`` the visible history
    (encoded once, by ``prepare``); the tools offered are the server's (``declared``
    already) then the client's own, withheld on the last round so that no server
    renders them into a prompt the model may not act on. ``tool_choice`` follows
    docs/design.md §6 round by round. A round whose server tools a search chose
    (``CompletionRequest.tools``) offers those, declared by ``declare``.
    """

    __slots__ = (
        "_choice",
        "_client",
        "_client_tools",
        "_declare",
        "_declared_client",
        "_definitions",
        "_history",
        "_params",
        "_prompt_bytes",
        "_tools",
        "_visible",
        "client_max_tokens",
        "name",
        "upstream",
    )

    def __init__(self, client: ChatClient, ask: ModelAsk, declarations: Declarations) -> None:
        """One request's model server, from what the surface asked for (``ask``) and the
        dialect's ``declarations`` of server tools."""
        params = ask.params
        declared = declarations.each if ask.searched else declarations
        self._client = client
        self.upstream = ask.upstream
        self.name = ask.upstream.name
        self._history = ask.history
        self._visible: list[dict[str, Any]] | None = None
        self._choice = params.tool_choice
        self._params = encode_parameters(params)
        self._params.pop("n", None)
        if params.tool_choice is not None:  # each round's own (``round_tool_choice``)
            del self._params["tool_choice"]
        self._params["model"] = ask.model
        self._definitions = ask.client_tools
        self._tools = declared(ask.server_tools)
        self._declare: Declare = declarations.each
        self._declared_client: list[dict[str, Any]] = []
        self._client_tools = ask.client_names
        self.client_max_tokens = params.answer_bound
        self._prompt_bytes: int | None = None

    def prepare(self) -> list[dict[str, Any]]:
        """The visible history and the tools in the dialect, encoded once (a surface
        does it off the event loop for a large body)."""
        if self._visible is None:
            if self._definitions:
                self._declared_client = encode_tools(self._definitions)
                self._tools = [*self._tools, *self._declared_client]
            # a tool's image goes to a user turn: chat's tool messages hold text only
            self._visible = tool_media_moved(encode_messages(self._history))
        return self._visible

    def prompt_bytes(self) -> int:
        """The size of what every round sends before its hidden items (for budgets),
        encoded once (a surface does it off the event loop for a large body)."""
        if self._prompt_bytes is None:
            visible = len(dumps(self.prepare()))
            self._prompt_bytes = visible + (len(dumps(self._tools)) if self._tools else 0)
        return self._prompt_bytes

    @property
    def model(self) -> str:
        """The model name sent upstream."""
        return str(self._params["model"])

    @property
    def base_url(self) -> str:
        return self.upstream.base_url

    def _messages(self, ask: CompletionRequest) -> list[dict[str, Any]]:
        visible = self.prepare()
        return [*visible, *messages(ask.hidden)] if ask.hidden else visible

    def transcript(self, ask: CompletionRequest) -> Iterator[dict[str, Any]]:
        """What a round sends, as telemetry that records content writes it (lazily: it
        takes only what fits)."""
        return genai_messages(with_hidden(self._history, ask.hidden))

    def body(self, ask: CompletionRequest, stream: bool) -> dict[str, Any]:
        """The request of one round."""
        history = self._messages(ask)
        params = self._params
        if ask.max_tokens is not None:  # the budget's bound, in the field the client used
            field = "max_completion_tokens" if "max_completion_tokens" in params else "max_tokens"
            params = {**params, field: ask.max_tokens}
        if ask.final:
            params = {k: v for k, v in params.items() if k not in _TOOL_FIELDS}
            return round_body(params, params["model"], history, None, stream, None)
        choice = round_tool_choice(self._choice, ask.first, False, self._client_tools)
        encoded = encode_tool_choice(choice) if choice is not None else None
        tools = self._tools
        if ask.tools is not None:
            tools = [*self._declare(ask.tools), *self._declared_client]
        return round_body(params, params["model"], history, tools, stream, encoded)

    def _read(self, whole: dict[str, Any]) -> Completion:
        """A whole answer as the round's values (in a worker thread when it is large)."""
        return parse_completion(whole, self.name)

    async def answer(self, ask: CompletionRequest) -> Completion:
        body = self.body(ask, False)
        return await self._client.chat(self.upstream, body, self._read, ask.trace)

    async def stream(self, ask: CompletionRequest) -> AsyncIterator[ChoiceDelta | Completion]:
        """The round's pieces as they come, then the round they made up."""
        assembler = RoundAssembler(self.name)
        chunks = self._client.chat_stream(self.upstream, self.body(ask, True), ask.trace)
        try:
            async for chunk in chunks:
                for piece in assembler.add(chunk):
                    yield piece
        finally:
            await chunks.aclose()
        if assembler.finish_reason is None:
            raise UpstreamError(f"The upstream model server {self.name!r} ended the stream early.")
        yield assembler.round()


# What the last round leaves out: no tools are offered, so none may be chosen.
_TOOL_FIELDS = frozenset(
    {"tools", "tool_choice", "parallel_tool_calls", "functions", "function_call"}
)
