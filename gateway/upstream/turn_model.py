"""One request's model server over a turn-based dialect (Anthropic Messages, Bedrock
Converse; docs/design.md §20): what both bind once — the parameters, the visible
history as turns and its system blocks, the tools (the server's declared already, then
the client's own) — and what both do alike round by round. A dialect's model writes a
round's body and reads its answers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from gateway.upstream.port import ModelAsk
from gateway.upstream.rounds import Declarations, genai_messages, round_tool_choice, with_hidden
from gateway.upstream.turns import Blocks, Turn, hidden_turns, joined, system_and_turns
from gateway.values import CompletionRequest, ToolChoice, ToolDefinition
from tool_registry import dumps

Declare = Callable[[tuple[ToolDefinition, ...]], list[Any]]
Cached = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
DEFAULT_MAX_TOKENS = 4096  # both dialects need a bound on every answer


class TurnModel:
    """The shared half of a turn-based dialect's model server."""

    __slots__ = (
        "_blocks",
        "_cached",
        "_choice",
        "_client_names",
        "_client_tools",
        "_declare",
        "_declare_one",
        "_declared_client",
        "_history",
        "_prompt_bytes",
        "_system",
        "_tools",
        "_visible",
        "client_max_tokens",
        "max_tokens",
        "name",
        "target",
        "upstream",
    )

    def __init__(
        self,
        blocks: Blocks,
        ask: ModelAsk,
        declarations: Declarations,
        declare_one: Callable[[ToolDefinition], dict[str, Any]],
        cached: Cached,
    ) -> None:
        """One request's model server, from what the surface asked for (``ask``) and
        the dialect's ``declarations`` of server tools."""
        upstream, params = ask.upstream, ask.params
        declared = declarations.each if ask.searched else declarations
        self._blocks = blocks
        self.upstream = upstream
        self.name = upstream.name
        self.target = ask.model
        self._history = ask.history
        self._visible: list[Turn] | None = None
        self._system: list[dict[str, Any]] = []
        self._choice = params.tool_choice
        self.client_max_tokens = params.answer_bound
        self.max_tokens = self.client_max_tokens or ask.answer_tokens or DEFAULT_MAX_TOKENS
        self._client_tools = ask.client_tools
        self._client_names = ask.client_names
        self._tools = declared(ask.server_tools)
        self._declare = declarations.each
        self._declare_one = declare_one
        self._cached = cached
        self._declared_client: list[dict[str, Any]] = []
        self._prompt_bytes: int | None = None

    def prepare(self) -> list[Turn]:
        """The system blocks, the visible turns and the tools, encoded once."""
        if self._visible is None:
            if self._client_tools:
                self._declared_client = [self._declare_one(tool) for tool in self._client_tools]
                self._tools = [*self._tools, *self._declared_client]
            self._system, self._visible = system_and_turns(self._history, self._blocks)
            if self.upstream.cache_prompt:
                self._system = self._cached(self._system)
        return self._visible

    def prompt_bytes(self) -> int:
        if self._prompt_bytes is None:
            visible = len(dumps(self.prepare())) + len(dumps(self._system))
            self._prompt_bytes = visible + (len(dumps(self._tools)) if self._tools else 0)
        return self._prompt_bytes

    @property
    def model(self) -> str:
        return self.target

    @property
    def base_url(self) -> str:
        return self.upstream.base_url

    def transcript(self, ask: CompletionRequest) -> Iterator[dict[str, Any]]:
        return genai_messages(with_hidden(self._history, ask.hidden))

    def system(self) -> list[dict[str, Any]]:
        self.prepare()
        return self._system

    def turns(self, ask: CompletionRequest) -> list[Turn]:
        """The round's turns: the visible ones, then its hidden rounds."""
        visible = self.prepare()
        return joined(visible, hidden_turns(ask.hidden, self._blocks)) if ask.hidden else visible

    def tools(self, ask: CompletionRequest) -> list[dict[str, Any]]:
        """The round's tools (a search's choice, where one chose them), marked for the
        prompt cache where the operator asks."""
        self.prepare()
        tools = self._tools
        if ask.tools is not None:
            tools = [*self._declare(ask.tools), *self._declared_client]
        return self._cached(tools) if tools and self.upstream.cache_prompt else tools

    def choice(self, ask: CompletionRequest) -> ToolChoice | None:
        """The round's tool choice (docs/design.md §6)."""
        return round_tool_choice(self._choice, ask.first, ask.final, self._client_names)
