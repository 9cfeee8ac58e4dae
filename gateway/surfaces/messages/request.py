"""Reading an Anthropic Messages request (``POST /v1/messages``, docs/design.md §20,
docs/claude.md) into the gateway's values: the system text, alternating turns whose
blocks become messages (a user turn's ``tool_result`` blocks each a tool message
before its text; an assistant turn's ``tool_use`` blocks its calls, its thinking
carried), the tools, ``tool_choice`` and the rest of the parameters.

Content becomes the values' own shapes (chat's): an image block an ``image_url`` part
(its base64 data as a ``data:`` URL, or its address), a PDF document a ``file`` part,
so that every dialect reads it. Fields only a Messages server reads (``thinking``,
``metadata``'s others, ``service_tier``…) ride in the parameters' ``extra`` for the
``anthropic`` dialect, and no other dialect sends them. Strict about what the gateway
relies on (roles, block types, a tool's name), lenient about the rest."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from gateway.errors import BadRequest
from gateway.policy.limits import Narrowing
from gateway.surfaces.media import IMAGES, media_problem
from gateway.surfaces.request_fields import model_request, parse_narrowing, user_text
from gateway.values import (
    APPROVAL_TOOL,
    NO_EXTRA,
    Message,
    Parameters,
    Part,
    ResponseFormat,
    ToolCall,
    ToolChoice,
    ToolDefinition,
)
from tool_registry import dumps_text, immutable

# Fields a Messages server reads that the values do not: for the ``anthropic`` dialect.
NATIVE = frozenset(
    {
        "thinking",
        "service_tier",
        "inference_geo",
        "speed",
        "container",
        "top_k",
        "context_management",
    }
)
_THINKING = frozenset({"thinking", "redacted_thinking"})


@immutable
class HostedTool:
    """A tool of a server-side type (``web_search_…``, ``bash_…``), which the gateway
    does not run: the tenant's ``hosted_tools`` decides whether it is refused or
    dropped."""

    index: int
    type: str


@immutable
class MessagesRequest:
    body: Mapping[str, Any]  # as the client sent it, less the ``toolgate`` field
    messages: tuple[Message, ...]  # its system text and turns, as values
    parameters: Parameters
    model: str
    stream: bool
    client_tools: tuple[ToolDefinition, ...]
    client_tool_names: frozenset[str]
    narrowing: Narrowing
    hosted: tuple[HostedTool, ...] = ()
    client_approves: bool = False
    thinking: bool = False  # the client asked to see the model's thinking

    def user_text(self) -> str:
        return user_text(self.messages)

    @property
    def stop_sequences(self) -> tuple[str, ...]:
        """The client's stop sequences (checked strings when the request was read)."""
        return tuple(self.body.get("stop_sequences") or ())


def _bad(message: str, param: str) -> BadRequest:
    return BadRequest(message, param=param)


def _blocks(content: Any, param: str) -> list[dict[str, Any]]:
    """A turn's content as blocks: a string is one text block."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise _bad(f"'{param}' must be a string or an array of content blocks.", param)
    for index, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            where = f"{param}[{index}]"
            raise _bad(f"'{where}' must be a content block with a string 'type'.", where)
    return content


DOCUMENTS = frozenset({"application/pdf"})


def _data_url(source: Any, param: str, allowed: frozenset[str]) -> str:
    """An image's or document's source as a URL: base64 data as ``data:`` (checked as
    every surface checks it: base64, of a kind ``allowed``, and the kind it is labelled),
    or its own."""
    if isinstance(source, dict):
        kind = source.get("type")
        if kind == "base64":
            media, data = source.get("media_type"), source.get("data")
            if isinstance(media, str) and isinstance(data, str):
                problem = media_problem(data, media, allowed)
                if problem is not None:
                    raise _bad(f"'{param}.source.data' {problem}.", param)
                return f"data:{media};base64,{data}"
        if kind == "url" and isinstance(source.get("url"), str):
            return str(source["url"])
    raise _bad(f"'{param}.source' must be base64 data with a media type, or a URL.", param)


def _part(block: dict[str, Any], param: str) -> Part:
    kind = block["type"]
    if kind == "text":
        text = block.get("text")
        if not isinstance(text, str):
            raise _bad(f"'{param}.text' must be a string.", param)
        rest = {k: v for k, v in block.items() if k == "cache_control"}
        return Part("text", text, MappingProxyType(rest) if rest else NO_EXTRA)
    if kind == "image":
        url = _data_url(block.get("source"), param, IMAGES)
        return Part("image_url", None, MappingProxyType({"image_url": {"url": url}}))
    if kind == "document":
        url = _data_url(block.get("source"), param, DOCUMENTS)
        file: dict[str, Any] = {"file_data": url}
        if isinstance(block.get("title"), str):
            file["filename"] = block["title"]
        return Part("file", None, MappingProxyType({"file": file}))
    raise _bad(
        f"'{param}' is a {kind[:40]!r} block, which the gateway does not read here: send "
        "text, image and document blocks (and tool_use, tool_result and thinking in "
        "their turns).",
        param,
    )


def _content(parts: list[Part]) -> str | tuple[Part, ...] | None:
    """Parts as a message's content: one plain text part as its text."""
    if not parts:
        return None
    if len(parts) == 1 and parts[0].type == "text" and not parts[0].extra:
        return parts[0].text
    return tuple(parts)


def _tool_message(block: dict[str, Any], param: str) -> Message:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise _bad(f"'{param}.tool_use_id' is required and must be a string.", param)
    given = block.get("content", "")
    if isinstance(given, str):
        content: str | tuple[Part, ...] | None = given
    else:
        blocks = _blocks(given, f"{param}.content")
        content = _content([_part(b, f"{param}.content[{i}]") for i, b in enumerate(blocks)])
    extra = MappingProxyType({"is_error": True}) if block.get("is_error") is True else NO_EXTRA
    return Message("tool", content if content is not None else "", call_id=call_id, extra=extra)


def _user_turn(content: Any, param: str) -> list[Message]:
    """A user turn: its tool results, each a tool message, then its other blocks."""
    results: list[Message] = []
    parts: list[Part] = []
    for index, block in enumerate(_blocks(content, param)):
        where = f"{param}[{index}]"
        if block["type"] == "tool_result":
            results.append(_tool_message(block, where))
        else:
            parts.append(_part(block, where))
    said = _content(parts)
    return [*results, *([Message("user", said)] if said is not None else [])]


def _assistant_turn(content: Any, param: str) -> Message:
    parts: list[Part] = []
    calls: list[ToolCall] = []
    carried: list[Mapping[str, Any]] = []
    for index, block in enumerate(_blocks(content, param)):
        where = f"{param}[{index}]"
        kind = block["type"]
        if kind == "tool_use":
            call_id, name, given = block.get("id"), block.get("name"), block.get("input", {})
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise _bad(f"'{where}' must have a string 'id' and 'name'.", where)
            arguments = dumps_text(given) if isinstance(given, dict) else "{}"
            calls.append(ToolCall(call_id, name, arguments))
        elif kind in _THINKING:
            carried.append(MappingProxyType(dict(block)))
        else:
            parts.append(_part(block, where))
    content = _content(parts)
    extra = NO_EXTRA if content is not None or not calls else MappingProxyType({"content": None})
    return Message("assistant", content, tuple(calls), extra=extra, carried=tuple(carried))


def decode_history(body: Mapping[str, Any]) -> tuple[Message, ...]:
    """The system text and the turns as messages."""
    history: list[Message] = []
    system = body.get("system")
    if system is not None:
        parts = [_part(b, f"system[{i}]") for i, b in enumerate(_blocks(system, "system"))]
        said = _content(parts)
        if said is not None:
            history.append(Message("system", said))
    turns = body.get("messages")
    if not isinstance(turns, list) or not turns:
        raise _bad("'messages' must be a non-empty array.", "messages")
    for index, turn in enumerate(turns):
        param = f"messages[{index}]"
        if not isinstance(turn, dict):
            raise _bad(f"'{param}' must be an object.", param)
        role = turn.get("role")
        content = turn.get("content")
        if role == "user":
            history.extend(_user_turn(content, f"{param}.content"))
        elif role == "assistant":
            history.append(_assistant_turn(content, f"{param}.content"))
        elif role == "system":
            parts = [
                _part(b, f"{param}.content[{i}]") for i, b in enumerate(_blocks(content, param))
            ]
            said = _content(parts)
            if said is not None:
                history.append(Message("system", said))
        else:
            raise _bad(f"'{param}.role' must be 'user' or 'assistant'.", f"{param}.role")
    return tuple(history)


def _tools(raw: Any) -> tuple[list[ToolDefinition], list[HostedTool], bool]:
    """The client's own tools, the hosted ones apart, and whether it sent the approval
    tool (it approves held calls itself, docs/design.md §13)."""
    if raw is None:
        return [], [], False
    if not isinstance(raw, list):
        raise _bad("'tools' must be an array.", "tools")
    tools: list[ToolDefinition] = []
    hosted: list[HostedTool] = []
    approves = False
    for index, tool in enumerate(raw):
        param = f"tools[{index}]"
        if not isinstance(tool, dict):
            raise _bad(f"'{param}' must be an object.", param)
        kind = tool.get("type", "custom")
        if kind != "custom":
            hosted.append(HostedTool(index, str(kind)[:80]))
            continue
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise _bad(f"'{param}.name' is required and must be a string.", f"{param}.name")
        if name == APPROVAL_TOOL:
            approves = True
            continue
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            raise _bad(f"'{param}.input_schema' must be an object.", f"{param}.input_schema")
        description = tool.get("description")
        extra = {k: v for k, v in tool.items() if k in ("cache_control", "strict")}
        tools.append(
            ToolDefinition(
                name,
                description if isinstance(description, str) else None,
                schema,
                extra=MappingProxyType(extra) if extra else NO_EXTRA,
            )
        )
    return tools, hosted, approves


def _tool_choice(raw: Any) -> tuple[ToolChoice | None, bool | None]:
    if raw is None:
        return None, None
    if not isinstance(raw, dict) or raw.get("type") not in ("auto", "any", "tool", "none"):
        raise _bad("'tool_choice.type' must be auto, any, tool or none.", "tool_choice")
    parallel = False if raw.get("disable_parallel_tool_use") is True else None
    kind = raw["type"]
    if kind == "tool":
        name = raw.get("name")
        if not isinstance(name, str):
            raise _bad("'tool_choice.name' is required for a tool choice.", "tool_choice.name")
        return ToolChoice("required", name), parallel
    return ToolChoice("required" if kind == "any" else str(kind)), parallel


def _parameters(
    body: Mapping[str, Any], choice: ToolChoice | None, parallel: bool | None, bound: bool
) -> Parameters:
    max_tokens = body.get("max_tokens")
    if (bound or max_tokens is not None) and (type(max_tokens) is not int or max_tokens < 0):
        raise _bad("'max_tokens' is required and must be a whole number.", "max_tokens")
    extra: dict[str, object] = {k: body[k] for k in NATIVE if k in body}
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise _bad("'stop_sequences' must be an array of strings.", "stop_sequences")
        extra["stop"] = list(stops)
    metadata = body.get("metadata")
    user = metadata.get("user_id") if isinstance(metadata, dict) else None
    output = body.get("output_config")
    form = output.get("format") if isinstance(output, dict) else None
    response_format = None
    if (
        isinstance(form, dict)
        and form.get("type") == "json_schema"
        and isinstance(form.get("schema"), dict)
    ):
        response_format = ResponseFormat("json_schema", "output", None, form["schema"])
    effort = output.get("effort") if isinstance(output, dict) else None
    temperature, top_p = body.get("temperature"), body.get("top_p")
    return Parameters(
        temperature=temperature
        if isinstance(temperature, int | float) and not isinstance(temperature, bool)
        else None,
        top_p=top_p if isinstance(top_p, int | float) and not isinstance(top_p, bool) else None,
        max_tokens=max_tokens if type(max_tokens) is int and max_tokens > 0 else None,
        tool_choice=choice,
        parallel_tool_calls=parallel,
        response_format=response_format,
        reasoning_effort=effort if isinstance(effort, str) else None,
        user=user if isinstance(user, str) else None,
        extra=MappingProxyType(extra) if extra else NO_EXTRA,
        wire="anthropic",
    )


def parse_messages_request(
    raw: bytes, headers: Mapping[str, str], bound: bool = True
) -> MessagesRequest:
    """A Messages request (``bound``: its ``max_tokens`` is required, as it is of every
    request but a count of its tokens)."""
    body, model = model_request(raw)
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise _bad("'stream' must be a boolean.", "stream")
    narrowing = parse_narrowing(body.pop("toolgate", None), headers)
    tools, hosted, approves = _tools(body.get("tools"))
    choice, parallel = _tool_choice(body.get("tool_choice"))
    thinking = body.get("thinking")
    return MessagesRequest(
        MappingProxyType(body),
        decode_history(body),
        _parameters(body, choice, parallel, bound),
        model,
        bool(stream),
        tuple(tools),
        frozenset(tool.name for tool in tools),
        narrowing,
        tuple(hosted),
        approves,
        isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive"),
    )
