"""The loop engine's values (docs/design.md §10): a tool call, an assistant turn, a tool's
output, usage, one round's answer. Surfaces and the upstream dialect (``dialect``)
turn wire dicts into these and back; the engine sees nothing else."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import field
from types import MappingProxyType
from typing import Any, Literal

# A tool definition and what a value keeps as it came are the tool library's values.
from tool_registry import NO_EXTRA as NO_EXTRA
from tool_registry import Extra as Extra
from tool_registry import ToolDefinition as ToolDefinition
from tool_registry import immutable

# ``approval``: not the model's — a held call handed to the client to approve
# (chat: a call of the client's ``toolgate_approval`` tool; Responses: an
# ``mcp_approval_request`` item), whose id is the approval's.
CallKind = Literal["function", "custom", "approval"]
APPROVAL_TOOL = "toolgate_approval"  # the chat tool a client approves calls with
# The caps a loop can reach: its iterations, tool calls and time, its envelope (tokens,
# cost) and the tenant's budget windows (quota).
CapKind = Literal["iterations", "tool_calls", "time", "tokens", "cost", "quota"]


@immutable
class ToolCall:
    """A call the model made. ``arguments`` is the JSON text (a custom tool's input) as
    the model wrote it; ``name`` is None when the model named nothing usable."""

    id: str
    name: str | None
    arguments: str = ""
    kind: CallKind = "function"


# Blocks a model server must get back unchanged in the following rounds of a run, in its
# own dialect's shape (Anthropic's thinking blocks with their signatures): never read,
# never shown, only carried (docs/design.md §20).
Carried = tuple[Extra, ...]


@immutable
class AssistantMessage:
    """An assistant turn: its text, its tool calls, a refusal if it refused, and what
    its dialect needs back in the next rounds (``carried``)."""

    content: str | None
    calls: tuple[ToolCall, ...] = ()
    refusal: str | None = None
    carried: Carried = ()


@immutable
class ToolOutput:
    """What a server tool answered (or the gateway in its place), for the model;
    ``error`` when the call failed (dialects with an error flag send it)."""

    call_id: str
    content: str
    error: bool = False


HiddenItem = AssistantMessage | ToolOutput  # an item of the rounds the client does not see


@immutable
class Part:
    """A part of a message's content: its ``type``, its ``text`` when it has one (a
    text part's), and whatever else it holds (an image's URL, audio) as it came."""

    type: str
    text: str | None = None
    extra: Extra = NO_EXTRA


@immutable
class Message:
    """A message of the history a model reads: the client's, a stored one, or a hidden
    item put back. Typed where the gateway reads it — its role, its content (text, or
    parts), an assistant's tool calls, the call a tool message answers — and lossless:
    what the gateway does not read, or reads in no shape it knows (a ``name``, audio,
    a content that is neither text nor parts), is in ``extra`` as it came. ``content``
    None means no text was read; ``extra`` then says whether it was null or absent."""

    role: str
    content: str | tuple[Part, ...] | None = None
    calls: tuple[ToolCall, ...] = ()
    call_id: str | None = None  # a tool message's: the call it answers
    extra: Extra = NO_EXTRA
    carried: Carried = ()  # an assistant turn's, for its dialect (``AssistantMessage``)

    @property
    def text(self) -> str:
        """Its text: the content's, or its parts' joined."""
        content = self.content
        if isinstance(content, str):
            return content
        if content is None:
            return ""
        return "".join(part.text for part in content if part.text is not None)


NULL_CONTENT: Extra = MappingProxyType({"content": None})  # an assistant turn with no text


def as_message(item: HiddenItem) -> Message:
    """A hidden item as a message of the history (an assistant turn says its content is
    null when it has no text, as the dialect writes it)."""
    if isinstance(item, ToolOutput):
        return Message("tool", item.content, call_id=item.call_id)
    extra = NULL_CONTENT if item.content is None else NO_EXTRA
    return Message("assistant", item.content, item.calls, extra=extra, carried=item.carried)


# Token usage as an upstream reported it, once believed (``upstream/numbers.py``): its
# counts and amounts by name, nested details likewise. OpenAI's names are read where
# usage is counted (``policy/prices.py``); any other still adds up.
UsageCounts = dict[str, "int | float | UsageCounts"]


class Usage:
    """Token usage summed over rounds. Every number the upstream reports is summed,
    nested details too, so fields the gateway does not know still add up."""

    __slots__ = ("totals",)

    def __init__(self) -> None:
        self.totals: UsageCounts = {}

    def add(self, usage: Mapping[str, object] | None) -> None:
        """Add a round's usage (what is not a number, or numbers by name, is left out)."""
        if usage:
            _add(self.totals, usage)

    def __bool__(self) -> bool:
        return bool(self.totals)

    def tokens(self, key: str) -> int:
        value = self.totals.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _add(total: UsageCounts, usage: Mapping[str, object]) -> UsageCounts:
    """Add ``usage`` into ``total``. A value whose kind differs from what ``total``
    holds under its key (a number for details, text, booleans) is left out."""
    for key, value in usage.items():
        before = total.get(key)
        if isinstance(value, dict):
            if before is None or isinstance(before, dict):
                total[key] = _add(before if before is not None else {}, value)
        elif isinstance(value, int | float) and type(value) is not bool:
            if before is None:
                total[key] = value
            elif not isinstance(before, dict):
                total[key] = before + value
    return total


@immutable
class Completion:
    """One upstream round's answer. ``usage`` is as the upstream reported it (summed by
    ``Usage``); ``raw`` is the dialect's whole answer when it came in one piece, which
    the engine never reads (a surface that speaks the same dialect keeps the fields of
    the message it renders)."""

    turn: AssistantMessage
    usage: UsageCounts | None = None
    finish_reason: str | None = None
    raw: dict[str, Any] | None = field(default=None, compare=False)
    id: str | None = field(default=None, compare=False)  # the upstream's, for telemetry
    model: str | None = field(default=None, compare=False)  # the model that answered
    # The stop sequence the round ended at, where the upstream says it ("" where it says
    # only that it was one of them); None for any other end.
    stop_sequence: str | None = field(default=None, compare=False)


def stop_sequence_of(stop: Any, sequence: Any) -> str | None:
    """A dialect's stop sequence as ``Completion.stop_sequence`` reads it: ``sequence``
    when the round ``stop``ped at one (``""``: one, not said which)."""
    if stop != "stop_sequence":
        return None
    return sequence if isinstance(sequence, str) else ""


@immutable
class AnsweredRound:
    """A round's answer as a recording keeps it: which round of which choice."""

    round: int
    answer: Completion
    choice: int = 0


@immutable
class ChoiceDelta:
    """What a streamed round has for the client at once: text deltas (``content``,
    ``refusal``), and their logprobs if the upstream sent them."""

    delta: dict[str, str]
    logprobs: dict[str, Any] | None = None


@immutable
class ToolChoice:
    """Which tools the model may or must call: ``auto``, ``none`` or ``required``; one
    tool it must call (``name``, of ``kind`` function or custom); or only ``allowed``
    ones (under ``mode``). A choice in a shape the gateway does not read is ``unread``,
    as it came, and goes to the model server as it is."""

    mode: str = "auto"
    name: str | None = None
    kind: str = "function"
    allowed: tuple[str, ...] | None = None
    unread: object = None


@immutable
class ResponseFormat:
    """The shape the answer must take: JSON (``json_object``), or JSON under a schema
    (``json_schema``: its ``schema``, name, description, strictness)."""

    kind: str
    name: str | None = None
    description: str | None = None
    schema: Mapping[str, Any] | None = None
    strict: bool | None = None


@immutable
class Parameters:
    """What a client asks of the model besides its history and tools: typed where the
    gateway reads or translates it, the rest (``extra``: a chat client's ``seed``,
    ``stop``, ``logprobs``, any field a server adds) as it came, for the model server.
    A parameter sent in a shape the gateway does not read is in ``extra`` too."""

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    reasoning_effort: str | None = None
    user: str | None = None
    extra: Extra = NO_EXTRA
    # The wire ``extra`` came in (a surface's dialect): only a model server of the same
    # dialect reads it as it is (docs/design.md §20).
    wire: str = "openai"

    @property
    def answer_bound(self) -> int | None:
        """The client's bound on an answer (``max_completion_tokens``, or the older
        ``max_tokens``), if it set a usable one."""
        for bound in (self.max_completion_tokens, self.max_tokens):
            if bound is not None and bound > 0:
                return bound
        return None


@immutable
class CompletionRequest:
    """What the engine asks of one round: the hidden items so far (after the visible
    history the model server holds), whether it is the first round, and whether it is
    the last (no tools are offered then)."""

    hidden: list[HiddenItem]
    first: bool
    final: bool
    max_tokens: int | None = None  # the budget's bound on the round's answer, if any
    trace: dict[str, str] | None = None  # W3C headers naming the round's span, if traced
    # The server tools offered, when a search chooses them (None: every tool in play).
    tools: tuple[ToolDefinition, ...] | None = None


CONNECT_PATH = "/v1/toolgate/connect"  # a connect link's path, under server.public_url


@immutable
class ConnectLink:
    """A connection the user has not made (or whose grant is gone): where they make it
    (a short-lived, single-use link, docs/design.md §18)."""

    connection: str
    url: str
    title: str = ""  # how the user knows it (its ``display_name``); else its name

    def words(self) -> str:
        """The line the gateway adds to an answer for the user (docs/security.md)."""
        title = self.title or self.connection
        return f"{title} needs your permission first. Connect it here, then ask again: {self.url}"


@immutable
class CredentialRefused:
    """A connection that cannot act for the user now, and why (words safe to show)."""

    connection: str
    reason: str


# Keeps the hidden items of a loop that hands calls back (a surface's own state):
# the items before the hand-back, its whole turn, the outputs of the server calls of
# that turn, the calls handed back (approvals among them), and where the run first
# read untrusted words, if it has (docs/design.md §13: taint survives a hand-back).
KeepTurn = Callable[
    [list[HiddenItem], AssistantMessage, list[ToolOutput], tuple[ToolCall, ...], str | None],
    Awaitable[None],
]
