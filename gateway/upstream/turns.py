"""What the turn-based dialects share (docs/design.md §20): Anthropic Messages and Bedrock
Converse both read a history as ``system`` apart and alternating user and assistant
turns of content blocks — a tool's result a block of a user turn, consecutive turns of
one role joined — and both report usage as fresh input beside the prompt cache's reads
and writes. Each dialect says how it writes a block (``Blocks``); the turns are made here,
once.

Pure: no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from gateway.upstream.numbers import believed_usage
from gateway.values import HiddenItem, Message, Part, ToolCall, ToolOutput, UsageCounts
from tool_registry import loads_object

Turn = dict[str, Any]  # {"role": "user" | "assistant", "content": [block, ...]}
Content = str | tuple[Part, ...] | None


class Blocks(Protocol):
    """How a dialect writes the blocks of a turn."""

    def content(self, content: Content, role: str) -> list[dict[str, Any]]: ...

    def tool_use(self, call: ToolCall) -> dict[str, Any]: ...

    def tool_result(self, call_id: str, content: Content, error: bool) -> dict[str, Any]: ...

    def kept(self, block: Mapping[str, Any]) -> bool: ...  # a carried block of its own


def system_and_turns(
    history: Iterable[Message], blocks: Blocks
) -> tuple[list[dict[str, Any]], list[Turn]]:
    """A history as a turn-based dialect reads it: system and developer messages' content
    as the ``system`` blocks, the rest as alternating turns (a tool message's result in a
    user turn, flagged when the message says ``is_error``)."""
    system: list[dict[str, Any]] = []
    turns: list[Turn] = []
    for message in history:
        role = message.role
        if role in ("system", "developer"):
            system.extend(blocks.content(message.content, role))
            continue
        if role == "tool":
            error = message.extra.get("is_error") is True
            written = [blocks.tool_result(message.call_id or "", message.content, error)]
            role = "user"
        elif role == "assistant":
            written = _assistant(blocks, message.content, message.calls, message.carried)
        else:
            written = blocks.content(message.content, "user")
            role = "user"
        _append(turns, role, written)
    return system, turns


def hidden_turns(items: Iterable[HiddenItem], blocks: Blocks) -> list[Turn]:
    """The hidden rounds as turns: their carried blocks back in place, a failed call's
    result flagged."""
    turns: list[Turn] = []
    for item in items:
        if isinstance(item, ToolOutput):
            _append(turns, "user", [blocks.tool_result(item.call_id, item.content, item.error)])
        else:
            _append(turns, "assistant", _assistant(blocks, item.content, item.calls, item.carried))
    return turns


def joined(visible: list[Turn], hidden: list[Turn]) -> list[Turn]:
    """The visible turns then the hidden ones, the two joined where their roles meet."""
    if not hidden:
        return visible
    if visible and visible[-1]["role"] == hidden[0]["role"]:
        last, first = visible[-1], hidden[0]
        return [
            *visible[:-1],
            {"role": last["role"], "content": [*last["content"], *first["content"]]},
            *hidden[1:],
        ]
    return [*visible, *hidden]


def _append(turns: list[Turn], role: str, written: list[dict[str, Any]]) -> None:
    if not written:
        return
    if turns and turns[-1]["role"] == role:
        turns[-1]["content"].extend(written)
    else:
        turns.append({"role": role, "content": written})


def _assistant(
    blocks: Blocks,
    content: Content,
    calls: Sequence[ToolCall],
    carried: Iterable[Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """An assistant turn's blocks: what it carried first (thinking precedes the rest, as
    both APIs require), its content, its calls."""
    written = [dict(block) for block in carried if blocks.kept(block)]
    written.extend(blocks.content(content, "assistant"))
    written.extend(blocks.tool_use(call) for call in calls)
    return written


def call_input(call: ToolCall) -> Any:
    """A call's arguments as the JSON object a turn-based dialect sends: a custom tool's
    text as ``input``; a model's malformed arguments kept, so it reads them back."""
    if call.kind == "custom":
        return {"input": call.arguments}
    if not call.arguments.strip():
        return {}
    given = loads_object(call.arguments)
    return given if given is not None else {"arguments": call.arguments}


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def cache_usage(fresh: Any, out: Any, read: Any, wrote: Any, upstream: str) -> UsageCounts | None:
    """Usage reported as fresh input beside the cache's reads and writes, in the
    gateway's counting names (chat's): the prompt holds all three, each also said
    apart. What is not a count is left out (and the round's estimate charged for it)."""
    fresh, out = _int(fresh), _int(out)
    read, wrote = _int(read) or 0, _int(wrote) or 0
    counted: dict[str, Any] = {}
    if fresh is not None:
        counted["prompt_tokens"] = fresh + read + wrote
        counted["prompt_tokens_details"] = {"cached_tokens": read, "cache_write_tokens": wrote}
    if out is not None:
        counted["completion_tokens"] = out
    if fresh is not None and out is not None:
        counted["total_tokens"] = fresh + read + wrote + out
    return believed_usage(counted, upstream) if counted else None
