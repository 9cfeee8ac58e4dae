"""The ``bedrock`` dialect's codec (docs/design.md §20, docs/bedrock.md): the values as a
Converse request — ``system`` apart, tool calls and results as ``toolUse`` and
``toolResult`` blocks in alternating turns, the tools under ``toolConfig`` — and a
Converse answer, whole or as ConverseStream's events, back into values.

Pure: no I/O. What a server sends is hostile input: a shape the gateway relies on and
does not get is the upstream's fault (``UpstreamError``, a 502). What a client sent
that Converse cannot carry (audio, an image by address) is the client's (``BadRequest``).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from gateway.errors import BadRequest, UpstreamError
from gateway.upstream.bedrock.signatures import unsigned
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

_STOPS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
}
_IMAGES = {"image/png": "png", "image/jpeg": "jpeg", "image/gif": "gif", "image/webp": "webp"}
_DOCUMENTS = {"application/pdf": "pdf", "text/csv": "csv", "text/html": "html", "text/plain": "txt"}
# Fields of a client's request that Converse reads as they are.
NATIVE = frozenset(
    {
        "additionalModelRequestFields",
        "guardrailConfig",
        "performanceConfig",
        "requestMetadata",
        "serviceTier",
    }
)


# ---------------------------------------------------------------- requests


class _ConverseBlocks:
    """How Converse writes a turn's blocks (``turns.Blocks``)."""

    def content(self, content: Content, role: str) -> list[dict[str, Any]]:
        return _blocks(content, role)

    def tool_use(self, call: ToolCall) -> dict[str, Any]:
        return {
            "toolUse": {"toolUseId": call.id, "name": call.name or "", "input": call_input(call)}
        }

    def tool_result(self, call_id: str, content: Content, error: bool) -> dict[str, Any]:
        if isinstance(content, str) or content is None:
            given = [{"text": content or " "}]  # Converse refuses an empty text block
        else:
            given = _blocks(content, "tool") or [{"text": " "}]
        result: dict[str, Any] = {"toolUseId": call_id, "content": given}
        if error:
            result["status"] = "error"
        return {"toolResult": result}

    def kept(self, block: Mapping[str, Any]) -> bool:
        return "reasoningContent" in block


BLOCKS = _ConverseBlocks()


def _blocks(content: Content, role: str) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"text": content}] if content else []
    return [block for part in content if (block := _block(part, role)) is not None]


def _block(part: Part, role: str) -> dict[str, Any] | None:
    if part.text is not None and part.type in ("text", "input_text", "output_text"):
        return {"text": part.text} if part.text else None
    if part.type == "image_url":
        image = part.extra.get("image_url")
        url = image.get("url") if isinstance(image, dict) else None
        media, data = _data(url)
        if media in _IMAGES:
            return {"image": {"format": _IMAGES[media], "source": {"bytes": data}}}
    if part.type == "file":
        file = part.extra.get("file")
        media, data = _data(file.get("file_data") if isinstance(file, dict) else None)
        if media in _DOCUMENTS:
            name = file.get("filename") if isinstance(file, dict) else None
            document = {"format": _DOCUMENTS[media], "name": _name(name), "source": {"bytes": data}}
            return {"document": document}
    raise BadRequest(
        f"A {role} message holds {part.type[:40]!r} content the model's upstream (Bedrock "
        "Converse) cannot take: send text, images as base64 data URLs (png, jpeg, gif, "
        "webp) or documents as base64 data (pdf, csv, html, txt).",
        param="messages",
    )


def _data(url: Any) -> tuple[str, str]:
    """A base64 ``data:`` URL's media type and data (nothing else is taken)."""
    if isinstance(url, str) and url.startswith("data:"):
        head, _, data = url.partition(",")
        if ";base64" in head:
            return head[5:].split(";")[0], data
    return "", ""


def _name(name: Any) -> str:
    """A document's name as Converse allows it: letters, digits, spaces, a few marks."""
    given = name if isinstance(name, str) and name else "document"
    kept = "".join(c if c.isalnum() or c in " -()[]" else " " for c in given.rsplit(".", 1)[0])
    return " ".join(kept.split())[:200] or "document"


def declare(tool: ToolDefinition) -> dict[str, Any]:
    if tool.kind == "custom":
        schema: Mapping[str, Any] = {
            "type": "object",
            "properties": {"input": {"type": "string"}},
            "required": ["input"],
        }
    else:
        schema = tool.parameters or {"type": "object", "properties": {}}
    spec: dict[str, Any] = {"name": tool.name, "inputSchema": {"json": schema}}
    if tool.description:
        spec["description"] = tool.description
    return {"toolSpec": spec}


def cached(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``blocks`` (the system prompt's, or the tools) followed by a cache point, as the
    operator asks (``cache_prompt``): what comes before it is read from the cache on
    the run's later rounds."""
    if not blocks or "cachePoint" in blocks[-1]:
        return blocks
    return [*blocks, {"cachePoint": {"type": "default"}}]


def tool_choice(choice: ToolChoice | None) -> dict[str, Any] | None:
    """A round's ``toolChoice``: ``auto``, ``any`` (chat's ``required``), ``tool``. Converse
    has no ``none``: such a round offers the tools and names no choice."""
    if choice is None or choice.unread is not None:
        return None
    if choice.name is not None:
        return {"tool": {"name": choice.name}}
    if choice.mode == "required":
        return {"any": {}}
    if choice.mode == "auto":
        return {"auto": {}}
    return None


def parameters(params: Parameters, max_tokens: int) -> dict[str, Any]:
    """The client's parameters as Converse fields: ``inferenceConfig`` (the round's
    ``maxTokens`` is set per round), fields Converse reads as they are."""
    inference: dict[str, Any] = {}
    if params.temperature is not None:
        inference["temperature"] = params.temperature
    if params.top_p is not None:
        inference["topP"] = params.top_p
    stop = params.extra.get("stop")
    if isinstance(stop, str):
        inference["stopSequences"] = [stop]
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        inference["stopSequences"] = list(stop)
    inference["maxTokens"] = max_tokens
    encoded: dict[str, Any] = {"inferenceConfig": inference}
    for key, value in params.extra.items():
        if key in NATIVE:
            encoded[key] = value
    thinking = params.extra.get("thinking")
    if isinstance(thinking, dict):  # a Claude client's, for a Claude model on Bedrock
        fields = dict(encoded.get("additionalModelRequestFields") or {})
        fields["thinking"] = thinking
        encoded["additionalModelRequestFields"] = fields
    return encoded


# ---------------------------------------------------------------- answers


def _new_id() -> str:
    return f"tooluse_{secrets.token_hex(12)}"


def usage_of(usage: Any, upstream: str) -> UsageCounts | None:
    """Converse's usage in the gateway's counting names (``turns.cache_usage``)."""
    if not isinstance(usage, dict):
        return None
    return cache_usage(
        usage.get("inputTokens"),
        usage.get("outputTokens"),
        usage.get("cacheReadInputTokens"),
        usage.get("cacheWriteInputTokens"),
        upstream,
    )


def finish_reason(stop: Any) -> str | None:
    return _STOPS.get(stop, "stop") if isinstance(stop, str) else None


def _call(use: Any) -> ToolCall:
    use = use if isinstance(use, dict) else {}
    call_id, name, given = use.get("toolUseId"), use.get("name"), use.get("input")
    return ToolCall(
        call_id if isinstance(call_id, str) and call_id else _new_id(),
        name if isinstance(name, str) and name else None,
        dumps_text(given) if isinstance(given, dict) else "{}",
    )


def parse_answer(answer: Any, upstream: str = "") -> Completion:
    """A whole Converse answer as a round."""
    output = answer.get("output") if isinstance(answer, dict) else None
    message = output.get("message") if isinstance(output, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        raise UpstreamError("The upstream model server answered without a message.")
    text: list[str] = []
    calls: list[ToolCall] = []
    carried: list[Mapping[str, Any]] = []
    for block in content:
        if not isinstance(block, dict):
            raise UpstreamError("The upstream model server sent a malformed content block.")
        if isinstance(block.get("text"), str):
            text.append(block["text"])
        elif "toolUse" in block:
            calls.append(_call(block["toolUse"]))
        elif isinstance(block.get("reasoningContent"), dict):
            carried.append(MappingProxyType({"reasoningContent": block["reasoningContent"]}))
    stop = answer.get("stopReason")
    turn = _turn("".join(text), calls, carried, stop)
    # Claude on Bedrock says which sequence in its own fields; Converse alone does not.
    extra = answer.get("additionalModelResponseFields")
    said = extra.get("stop_sequence") if isinstance(extra, dict) else None
    usage = usage_of(answer.get("usage"), upstream)
    return Completion(turn, usage, finish_reason(stop), stop_sequence=stop_sequence_of(stop, said))


def _turn(
    text: str, calls: list[ToolCall], carried: list[Mapping[str, Any]], stop: Any
) -> AssistantMessage:
    if stop in ("guardrail_intervened", "content_filtered"):
        refusal = text or "The model's answer was filtered."
        return AssistantMessage(None, tuple(calls), refusal, tuple(carried))
    return AssistantMessage(text or None, tuple(calls), None, tuple(carried))


class _Block:
    __slots__ = ("call", "kind", "pieces", "redacted", "signature")

    def __init__(self, kind: str, call: ToolCall | None = None) -> None:
        self.kind = kind  # text, toolUse or reasoning
        self.call = call
        self.pieces: list[str] = []
        self.signature: list[str] = []
        self.redacted: str | None = None


class StreamAssembler:
    """Collects ConverseStream's events (each ``{event type: payload}``) into the round
    they make up; ``add`` returns the text to forward at once. An exception event is
    the upstream's failure; events of a later API version are passed over."""

    __slots__ = ("_blocks", "_usage", "ended", "stop", "stop_sequence", "upstream")

    def __init__(self, upstream: str = "") -> None:
        self.upstream = upstream
        self._blocks: dict[int, _Block] = {}
        self._usage: Any = None
        self.stop_sequence: str | None = None
        self.stop: str | None = None
        self.ended = False

    def add(self, kind: str, payload: dict[str, Any]) -> list[ChoiceDelta]:
        if kind == "contentBlockDelta":
            return self._delta(payload)
        if kind == "contentBlockStart":
            start = payload.get("start")
            use = start.get("toolUse") if isinstance(start, dict) else None
            if isinstance(use, dict):
                self._blocks[_index(payload)] = _Block("toolUse", _call(use))
        elif kind == "messageStop":
            stop = payload.get("stopReason")
            self.stop = stop if isinstance(stop, str) else None
            extra = payload.get("additionalModelResponseFields")
            said = extra.get("stop_sequence") if isinstance(extra, dict) else None
            self.stop_sequence = stop_sequence_of(self.stop, said)
        elif kind == "metadata":
            self._usage = payload.get("usage")
            self.ended = self.stop is not None
        elif kind.endswith("Exception"):
            said = payload.get("message")
            raise server_failed(
                self.upstream,
                f"a {kind[:64]} in its stream",
                unsigned(said) if isinstance(said, str) else unsigned(kind),
            )
        return []

    def _delta(self, payload: dict[str, Any]) -> list[ChoiceDelta]:
        delta = payload.get("delta")
        if not isinstance(delta, dict):
            raise UpstreamError("The upstream model server sent a malformed block delta.")
        index = _index(payload)
        if isinstance(delta.get("text"), str):
            block = self._blocks.setdefault(index, _Block("text"))
            block.pieces.append(delta["text"])
            return [ChoiceDelta({"content": delta["text"]})] if delta["text"] else []
        use = delta.get("toolUse")
        if isinstance(use, dict):
            started = self._blocks.get(index)
            if (
                started is None
                or started.kind != "toolUse"
                or not isinstance(use.get("input"), str)
            ):
                raise UpstreamError("The upstream model server streamed a call it never started.")
            started.pieces.append(use["input"])
            return []
        reasoning = delta.get("reasoningContent")
        if isinstance(reasoning, dict):
            block = self._blocks.setdefault(index, _Block("reasoning"))
            if isinstance(reasoning.get("text"), str):
                block.pieces.append(reasoning["text"])
            if isinstance(reasoning.get("signature"), str):
                block.signature.append(reasoning["signature"])
            if isinstance(reasoning.get("redactedContent"), str):
                block.redacted = reasoning["redactedContent"]
        return []

    def round(self) -> Completion:
        if self.stop is None:
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
            elif block.kind == "toolUse" and block.call is not None:
                given = "".join(block.pieces)
                calls.append(ToolCall(block.call.id, block.call.name, given or "{}"))
            elif block.kind == "reasoning":
                if block.redacted is not None:
                    content: dict[str, Any] = {"redactedContent": block.redacted}
                else:
                    thought: dict[str, Any] = {"text": "".join(block.pieces)}
                    if block.signature:
                        thought["signature"] = "".join(block.signature)
                    content = {"reasoningText": thought}
                carried.append(MappingProxyType({"reasoningContent": content}))
        turn = _turn("".join(text), calls, carried, self.stop)
        usage = usage_of(self._usage, self.upstream)
        stop = finish_reason(self.stop)
        return Completion(turn, usage, stop, stop_sequence=self.stop_sequence)


def _index(payload: dict[str, Any]) -> int:
    index = payload.get("contentBlockIndex", 0)
    if type(index) is not int or not 0 <= index < 10_000:
        raise UpstreamError("The upstream model server sent a block without its index.")
    return index
