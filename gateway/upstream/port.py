"""The model port (docs/design.md §20): what the engine asks a model server through
(``ModelServer``), what a request asks of one (``ModelAsk``), and what a dialect is
(``Dialect``: a codec and a client behind one ``open``). ``servers.ModelServers`` picks
the dialect an upstream's configuration names; nothing outside ``upstream/`` knows
which one answered."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any, Protocol

from gateway.config import UpstreamConfig
from gateway.values import (
    ChoiceDelta,
    Completion,
    CompletionRequest,
    Message,
    Parameters,
    ToolDefinition,
)
from tool_registry import immutable

# Where a dialect says which credentials it sends or signs with beyond the configuration's
# (refreshed temporary keys): they join the one list of secrets every sink redacts.
Secrets = Callable[[Iterable[str]], None]


@immutable
class ModelAsk:
    """One request's model server, as a surface asks for it: the upstream and the
    model name sent there, the client's parameters and visible history, and the tools
    offered — the server's (``server_tools``: every round's, or the first round's when
    a search chooses each round's, ``searched``) then the client's own, which only
    ``client_names`` may call; the most a dialect that must bound every answer asks
    for when the client did not (``answer_tokens``, the model's ``max_output_tokens``)."""

    upstream: UpstreamConfig
    model: str
    params: Parameters
    history: Sequence[Message]
    server_tools: tuple[ToolDefinition, ...] = ()
    client_tools: Sequence[ToolDefinition] = ()
    client_names: frozenset[str] = frozenset()
    searched: bool = False
    answer_tokens: int | None = None  # the model's bound on an answer, if configured
    stable_call_ids: bool = False  # its client echoes no call ids (``call_ids``)


class ModelServer(Protocol):
    """The engine's port to a model: one request's model server, its visible history
    and parameters bound (a dialect's, or a test's fake)."""

    name: str  # for errors and traces
    client_max_tokens: int | None  # the client's bound on each answer, if it set one

    @property
    def model(self) -> str: ...  # the model name it is asked for

    @property
    def base_url(self) -> str: ...  # where it is, for telemetry

    def prompt_bytes(self) -> int: ...  # what every round sends before its hidden items

    def transcript(
        self, ask: CompletionRequest
    ) -> Iterable[dict[str, Any]]: ...  # for telemetry, lazily

    async def answer(self, ask: CompletionRequest) -> Completion: ...

    def stream(
        self, ask: CompletionRequest
    ) -> AsyncIterator[ChoiceDelta | Completion]: ...  # the Completion comes last


class OpenedServer(ModelServer, Protocol):
    """A dialect's model server: it also encodes the visible history and the tools
    once, when asked (a surface does it off the event loop for a large body)."""

    def prepare(self) -> object: ...


class Dialect(Protocol):
    """A wire format of model servers: its codec and its client, behind one door."""

    def open(self, ask: ModelAsk) -> OpenedServer: ...

    async def probe(self, upstream: UpstreamConfig, timeout_s: float) -> tuple[int, str]:
        """One cheap request (no retries, no metrics): the status it answered and the
        start of its error message, if any. Raises ``httpx.TransportError`` or
        ``TimeoutError`` when nothing did."""
        ...
