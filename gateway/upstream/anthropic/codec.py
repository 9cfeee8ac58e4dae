"""The ``anthropic`` dialect's codec (docs/design.md §20, docs/anthropic.md): the values
as a Messages request — ``system`` apart, tool calls and results as ``tool_use`` and
``tool_result`` blocks in alternating turns — and a Messages answer, whole or as its
stream's events, back into values.

Pure: no I/O. What a server sends is hostile input: a shape the gateway relies on and
does not get is the upstream's fault (``UpstreamError``, a 502). What a client sent
that Messages cannot carry (audio, a file by id) is the client's (``BadRequest``).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from gateway.errors import BadRequest, UpstreamError
from gateway.upstream.exchange import server_failed
from gateway.upstream.turns import Content, cache_usage, call_input
from gateway.values import (
    AssistantMessage,
    ChoiceDelta,
    Completion,
    Parameters,
    Part,
    ToolCall,
    ToolChoice,
    ToolDefinition,
    UsageCounts,
    stop_sequence_of,
)
from tool_registry import dumps_text

# The ``anthropic-version`` every request names unless the upstream's ``headers`` name
# another: the API version whose fields this codec writes (the ``anthropic`` SDK's own
# since 2.14, which has no sampling parameters: ``temperature`` and ``top_p`` are not sent).
VERSION = "2026-10-21"

# Fields of a client's request that Messages reads as they are (a chat client's
# ``extra``, or a Claude client's own); every other field the dialect does not map is
# left out, as Messages refuses fields it does not know.
NATIVE = frozenset(
    {
        "thinking",
        "stop_sequences",
        "metadata",
        "service_tier",
        "output_config",
        "inference_geo",
        "speed",
        "container",
    }
)
_THINKING = frozenset({"thinking", "redacted_thinking"})  # carried back, never shown
_STOPS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}
_EFFORTS = {"minimal": "low", "low": "low", "medium": "medium", "high": "high"}


# ---------------------------------------------------------------- requests


class _MessagesBlocks:
    """How Messages writes a turn's blocks (``turns.Blocks``)."""

    def content(self, content: Content, role: str) -> list[dict[str, Any]]:
        return _blocks(content, role)

    def tool_use(self, call: ToolCall) -> dict[str, Any]:
        return {
            "type": "tool_use",
            "id": call.id,
            "name": call.name or "",
            "input": call_input(call),
        }

    def tool_result(self, call_id: str, content: Content, error: bool) -> dict[str, Any]:
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id}
        if isinstance(content, str) or content is None:
            block["content"] = content or ""
        else:
            block["content"] = _blocks(content, "tool")
        if error:
            block["is_error"] = True
        return block

    def kept(self, block: Mapping[str, Any]) -> bool:
        return block.get("type") in _THINKING


BLOCKS = _MessagesBlocks()


def _blocks(content: Content, role: str) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [block for part in content if (block := _block(part, role)) is not None]


_CACHE = "cache_control"
# A Claude client's own blocks, passed as they came.
_OWN_BLOCKS = frozenset({"image", "document", "search_result"})


def _block(part: Part, role: str) -> dict[str, Any] | None:
    """A content part as a Messages block: text, an image (chat's ``image_url``, by its
    data URL or address), a PDF (chat's ``file`` data), or a Claude client's own."""
    kind = part.type
    if part.text is not None and kind in ("text", "input_text", "output_text"):
        if not part.text:
            return None
        block: dict[str, Any] = {"type": "text", "text": part.text}
        if _CACHE in part.extra:
            block[_CACHE] = part.extra[_CACHE]
        return block
    if kind in _OWN_BLOCKS:
        return {"type": kind, **part.extra}
    if kind == "image_url":
        image = part.extra.get("image_url")
        url = image.get("url") if isinstance(image, dict) else None
        if isinstance(url, str):
            return {"type": "image", "source": _source(url, "image_url")}
    if kind == "file":
        file = part.extra.get("file")
        data = file.get("file_data") if isinstance(file, dict) else None
        if isinstance(data, str):
            return {"type": "document", "source": _source(data, "file")}
    raise BadRequest(
        f"A {role} message holds {kind[:40]!r} content, which the model's upstream "
        "(Anthropic Messages) cannot take: send text, images (as data URLs or addresses) "
        "or PDF files (as data).",
        param="messages",
    )


def _source(url: str, kind: str) -> dict[str, Any]:
    """An image's or document's source: a ``data:`` URL's bytes, or its address."""
    if url.startswith("data:"):
        head, _, data = url.partition(",")
        media = head[5:].split(";")[0]
        if ";base64" in head and media:
            return {"type": "base64", "media_type": media, "data": data}
        raise BadRequest(f"An {kind} data URL must be base64 with a media type.", param="messages")
    if url.startswith(("https://", "http://")):
        return {"type": "url", "url": url}
    raise BadRequest(f"An {kind} must be a data URL or an http(s) address.", param="messages")


def declare(tool: ToolDefinition) -> dict[str, Any]:
    """A tool as Messages declares it: its name, description and ``input_schema`` (a
    custom tool takes its text as ``input``)."""
    if tool.kind == "custom":
        schema: Mapping[str, Any] = {
            "type": "object",
            "properties": {"input": {"type": "string"}},
            "required": ["input"],
        }
    else:
        schema = tool.parameters or {"type": "object", "properties": {}}
    declared: dict[str, Any] = {"name": tool.name, "input_schema": schema}
    if tool.description:
        declared["description"] = tool.description
    for key in (_CACHE, "strict"):
        value = tool.extra.get(key, tool.outer.get(key))
        if value is not None:
            declared[key] = value
    return declared


EPHEMERAL = MappingProxyType({"type": "ephemeral"})


def cached(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``blocks`` (the system prompt's, or the tools) with the last marked for the prompt
    cache, as the operator asks (``cache_prompt``): what comes before it is read from the
    cache on the run's later rounds. A client's own mark is kept."""
    if not blocks or _CACHE in blocks[-1]:
        return blocks
    return [*blocks[:-1], {**blocks[-1], _CACHE: dict(EPHEMERAL)}]


def tool_choice(choice: ToolChoice | None, parallel: bool | None) -> dict[str, Any] | None:
    """A round's ``tool_choice``: ``auto``, ``any`` (chat's ``required``), ``tool`` (one
    named), ``none``; parallel calls turned off where the client asked."""
    if choice is None:
        encoded: dict[str, Any] | None = {"type": "auto"} if parallel is False else None
    elif choice.unread is not None:
        raw = choice.unread
        native = isinstance(raw, dict) and raw.get("type") in ("auto", "any", "tool", "none")
        encoded = dict(raw) if native and isinstance(raw, dict) else {"type": "auto"}
    elif choice.name is not None:
        encoded = {"type": "tool", "name": choice.name}
    else:
        encoded = {"type": {"required": "any"}.get(choice.mode, choice.mode)}
        if encoded["type"] not in ("auto", "any", "none"):
            encoded = {"type": "auto"}
    if encoded is not None and parallel is False and encoded["type"] != "none":
        encoded["disable_parallel_tool_use"] = True
    return encoded


def parameters(params: Parameters, sampling: bool = False) -> dict[str, Any]:
    """The client's parameters as Messages fields (``max_tokens`` and ``tool_choice`` are
    each round's own): stop sequences, the user, the answer's JSON schema and effort;
    fields Messages reads as they are. Anthropic's API (the version this codec names) has
    no sampling parameters: a client's ``temperature`` and ``top_p`` are left out, as its
    ``seed`` is, unless the upstream takes them (``sampling``: llama.cpp's and vLLM's
    Messages endpoints, whose defaults may keep a small model from calling tools)."""
    encoded: dict[str, Any] = {}
    if sampling:
        if params.temperature is not None:
            encoded["temperature"] = params.temperature
        if params.top_p is not None:
            encoded["top_p"] = params.top_p
    stop = params.extra.get("stop")
    if isinstance(stop, str):
        encoded["stop_sequences"] = [stop]
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        encoded["stop_sequences"] = list(stop)
    if params.user is not None:
        encoded["metadata"] = {"user_id": params.user[:256]}
    output: dict[str, Any] = {}
    form = params.response_format
    if form is not None and form.kind == "json_schema" and form.schema is not None:
        output["format"] = {"type": "json_schema", "schema": dict(form.schema)}
    effort = _EFFORTS.get(params.reasoning_effort or "")
    if effort is not None:
        output["effort"] = effort
    if output:
        encoded["output_config"] = output
    for key, value in params.extra.items():
        if key in NATIVE:
            encoded[key] = value
    return encoded


# ---------------------------------------------------------------- answers


def _new_id() -> str:
    return f"toolu_{secrets.token_hex(12)}"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def usage_of(usage: Any, upstream: str) -> UsageCounts | None:
    """Messages' usage in the gateway's counting names (``turns.cache_usage``)."""
    if not isinstance(usage, dict):
        return None
    return cache_usage(
        usage.get("input_tokens"),
        usage.get("output_tokens"),
        usage.get("cache_read_input_tokens"),
        usage.get("cache_creation_input_tokens"),
        upstream,
    )


def finish_reason(stop: Any) -> str | None:
    return _STOPS.get(stop, "stop") if isinstance(stop, str) else None


def _call(block: dict[str, Any]) -> ToolCall:
    call_id, name, given = block.get("id"), block.get("name"), block.get("input")
    return ToolCall(
        call_id if isinstance(call_id, str) and call_id else _new_id(),
        name if isinstance(name, str) and name else None,
        dumps_text(given) if isinstance(given, dict) else "{}",
    )


def parse_message(message: Any, upstream: str = "") -> Completion:
    """A whole Messages answer as a round."""
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        raise UpstreamError("The upstream model server answered without a message.")
    text: list[str] = []
    calls: list[ToolCall] = []
    carried: list[Mapping[str, Any]] = []
    for block in content:
        if not isinstance(block, dict):
            raise UpstreamError("The upstream model server sent a malformed content block.")
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            text.append(block["text"])
        elif kind == "tool_use":
            calls.append(_call(block))
        elif kind in _THINKING:
            carried.append(MappingProxyType(dict(block)))
    turn = _turn("".join(text), calls, carried, message.get("stop_reason"))
    usage = usage_of(message.get("usage"), upstream)
    stop = finish_reason(message.get("stop_reason"))
    return Completion(
        turn,
        usage,
        stop,
        None,
        _text(message.get("id")),
        _text(message.get("model")),
        stop_sequence_of(message.get("stop_reason"), message.get("stop_sequence")),
    )


class _Block:
    """A content block being streamed: its kind, its start, its pieces."""

    __slots__ = ("kind", "pieces", "signature", "start")

    def __init__(self, kind: str, start: dict[str, Any]) -> None:
        self.kind = kind
        self.start = start
        self.pieces: list[str] = []
        self.signature: list[str] = []


_DELTAS = {"text_delta": "text", "input_json_delta": "partial_json", "thinking_delta": "thinking"}


class StreamAssembler:
    """Collects a streamed answer's events into the round they make up; ``add``
    returns the text to forward at once. Events it does not know (a later version's)
    are passed over; an ``error`` event is the upstream's failure."""

    __slots__ = ("_blocks", "_usage", "ended", "id", "model", "stop", "stop_sequence", "upstream")

    def __init__(self, upstream: str = "") -> None:
        self.upstream = upstream
        self._blocks: dict[int, _Block] = {}
        self._usage: dict[str, Any] = {}
        self.stop: str | None = None
        self.stop_sequence: str | None = None
        self.ended = False
        self.id: str | None = None
        self.model: str | None = None

    def add(self, event: dict[str, Any]) -> list[ChoiceDelta]:
        kind = event.get("type")
        if kind == "content_block_delta":
            return self._delta(event)
        if kind == "content_block_start":
            block = _object(event.get("content_block"), "content block")
            index = _index(event)
            block_kind = block.get("type")
            started = _Block(block_kind if isinstance(block_kind, str) else "", block)
            self._blocks[index] = started
            text = block.get("text") if started.kind == "text" else None
            if isinstance(text, str) and text:
                started.pieces.append(text)
                return [ChoiceDelta({"content": text})]
        elif kind == "message_start":
            message = _object(event.get("message"), "message")
            self.id, self.model = _text(message.get("id")), _text(message.get("model"))
            self._add_usage(message.get("usage"))
        elif kind == "message_delta":
            delta = _object(event.get("delta"), "message delta")
            if isinstance(delta.get("stop_reason"), str):
                self.stop = delta["stop_reason"]
                self.stop_sequence = stop_sequence_of(self.stop, delta.get("stop_sequence"))
            self._add_usage(event.get("usage"))
        elif kind == "message_stop":
            self.ended = True
        elif kind == "error":
            error = event.get("error")
            said = error.get("message") if isinstance(error, dict) else None
            raise server_failed(
                self.upstream,
                "an error event in its stream",
                said if isinstance(said, str) else None,
            )
        return []

    def _delta(self, event: dict[str, Any]) -> list[ChoiceDelta]:
        block = self._blocks.get(_index(event))
        if block is None:
            raise UpstreamError("The upstream model server streamed a block it never started.")
        delta = _object(event.get("delta"), "block delta")
        kind = delta.get("type")
        if kind == "signature_delta":
            signature = delta.get("signature")
            if isinstance(signature, str):
                block.signature.append(signature)
            return []
        field = _DELTAS.get(kind) if isinstance(kind, str) else None
        if field is None:
            return []  # citations and what a later version adds
        piece = delta.get(field)
        if not isinstance(piece, str):
            raise UpstreamError(f"The upstream model server sent a malformed {kind}.")
        block.pieces.append(piece)
        if kind == "text_delta" and piece:
            return [ChoiceDelta({"content": piece})]
        return []

    def _add_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self._usage.update(usage)  # message_delta's counts are the totals so far

    def round(self) -> Completion:
        if not self.ended:
            raise UpstreamError(
                f"The upstream model server {self.upstream!r} ended the stream early."
            )
        text: list[str] = []
        calls: list[ToolCall] = []
        carried: list[Mapping[str, Any]] = []
        for index in sorted(self._blocks):
            block = self._blocks[index]
            if block.kind == "text":
                text.append("".join(block.pieces))
            elif block.kind == "tool_use":
                call = _call(block.start)
                given = "".join(block.pieces)
                calls.append(ToolCall(call.id, call.name, given or call.arguments))
            elif block.kind == "thinking":
                whole = {**block.start, "thinking": "".join(block.pieces)}
                if block.signature:
                    whole["signature"] = "".join(block.signature)
                carried.append(MappingProxyType(whole))
            elif block.kind == "redacted_thinking":
                carried.append(MappingProxyType(dict(block.start)))
        turn = _turn("".join(text), calls, carried, self.stop)
        usage = usage_of(self._usage, self.upstream)
        stop = finish_reason(self.stop)
        return Completion(turn, usage, stop, None, self.id, self.model, self.stop_sequence)


def _turn(
    text: str, calls: list[ToolCall], carried: list[Mapping[str, Any]], stop: Any
) -> AssistantMessage:
    """A turn; a refusal's words are its refusal (as chat says it), not its content."""
    if stop == "refusal":
        return AssistantMessage(None, tuple(calls), text or "The model refused.", tuple(carried))
    return AssistantMessage(text or None, tuple(calls), None, tuple(carried))


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise UpstreamError(f"The upstream model server sent a malformed {what}.")
    return value


def _index(event: dict[str, Any]) -> int:
    index = event.get("index")
    if type(index) is not int or not 0 <= index < 10_000:
        raise UpstreamError("The upstream model server sent a block without its index.")
    return index
