"""The values in chat-completions JSON (docs/design.md §10, §20): a history, tools and
parameters decoded into values (``Message``, ``ToolDefinition``, ``Parameters``), and
the values encoded back, losslessly. It is the gateway's own record format — what it
stores, records and fingerprints — and the chat surface's wire; the ``openai`` dialect
sends it as it is. Other dialects have codecs of their own, in their folders under
``upstream/``.

What the gateway reads is typed — the role, text or content parts, an assistant's tool
calls, the call a tool message answers. Everything else, and any of those fields in a
shape the gateway does not read (content that is neither text nor parts, tool calls
that are not all calls), stays in ``extra`` as it came and is encoded back unchanged:
the model server judges what the gateway does not. Of a tool call only OpenAI's fields
are kept (its id, type and function or custom payload); a client's own additions to a
call (an echoed stream ``index``) are not passed on, and a function call's empty
arguments are sent as ``{}``, as the gateway sends its own calls.

Pure: no I/O. The decoder takes any object a client sent and never raises.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gateway.values import (
    APPROVAL_TOOL,
    NO_EXTRA,
    AssistantMessage,
    HiddenItem,
    Message,
    Parameters,
    Part,
    ResponseFormat,
    ToolCall,
    ToolChoice,
    ToolDefinition,
    ToolOutput,
)
from tool_registry import dumps_text, parse_arguments

_READ = frozenset({"role", "content", "tool_calls", "tool_call_id"})


def decode_message(raw: Mapping[str, Any]) -> Message:
    """A chat message as a value (its ``role`` a string, checked by the caller; any
    other is kept as its text)."""
    role = raw.get("role")
    if len(raw) == 2 and type(role) is str:  # the common shape: a role and its text
        text = raw.get("content")
        if type(text) is str:
            return Message(role, text)
    return _decode(raw, role)


def _decode(raw: Mapping[str, Any], role: Any) -> Message:
    extra: dict[str, object] | None = None
    for key in raw:
        if key not in _READ:
            extra = {k: v for k, v in raw.items() if k not in _READ}
            break
    content: str | tuple[Part, ...] | None = None
    if "content" in raw:
        content = _content(raw["content"])
        if content is None:
            extra = {**(extra or {}), "content": raw["content"]}
    calls: tuple[ToolCall, ...] = ()
    if "tool_calls" in raw:
        read = _calls(raw["tool_calls"])
        if read is None:
            extra = {**(extra or {}), "tool_calls": raw["tool_calls"]}
        else:
            calls = read
    call_id = raw.get("tool_call_id")
    if not isinstance(call_id, str):
        if "tool_call_id" in raw:
            extra = {**(extra or {}), "tool_call_id": call_id}
        call_id = None
    return Message(
        role if isinstance(role, str) else str(role),
        content,
        calls,
        call_id,
        extra if extra is not None else NO_EXTRA,
    )


def decode_messages(raw: Iterable[Mapping[str, Any]]) -> tuple[Message, ...]:
    return tuple(decode_message(message) for message in raw)


def decode_history(raw: list[Any]) -> tuple[Message, ...] | int:
    """A client's ``messages`` as values, in one pass; or, where one is not an object
    with a string ``role``, its index (the surface says what is wrong with it)."""
    decoded: list[Message] = []
    append = decoded.append
    for index, message in enumerate(raw):
        if type(message) is not dict:
            return index
        role = message.get("role")
        if type(role) is not str:
            return index
        if len(message) == 2:  # decode_message's common shape, inline (a call a message)
            text = message.get("content")
            if type(text) is str:
                append(Message(role, text))
                continue
        append(_decode(message, role))
    return tuple(decoded)


def _content(value: Any) -> str | tuple[Part, ...] | None:
    """Text, or parts each an object with a string ``type``; else None (not read)."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        return None
    parts = []
    for part in value:
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            return None
        text = part.get("text")
        if isinstance(text, str):
            rest = {k: v for k, v in part.items() if k != "type" and k != "text"}
            parts.append(Part(part["type"], text, rest or NO_EXTRA))
        else:
            rest = {k: v for k, v in part.items() if k != "type"}
            parts.append(Part(part["type"], None, rest or NO_EXTRA))
    return tuple(parts)


def _calls(value: Any) -> tuple[ToolCall, ...] | None:
    """Tool calls when every one is a call: a string id and a function (or custom tool)
    with a string name and string arguments (input); else None (not read)."""
    if not isinstance(value, list) or not value:
        return None
    calls = []
    for call in value:
        if not isinstance(call, dict) or not isinstance(call.get("id"), str):
            return None
        kind = call.get("type", "function")
        if kind == "custom":
            custom = call.get("custom")
            if not isinstance(custom, dict):
                return None
            name, arguments = custom.get("name"), custom.get("input")
        elif kind == "function":
            function = call.get("function")
            if not isinstance(function, dict):
                return None
            name, arguments = function.get("name"), function.get("arguments")
        else:
            return None
        if not isinstance(name, str) or not isinstance(arguments, str):
            return None
        calls.append(ToolCall(call["id"], name, arguments, kind))
    return tuple(calls)


def call_dict(call: ToolCall) -> dict[str, Any]:
    """A tool call as a chat message carries it (an approval as a call of the
    client's ``toolgate_approval`` tool: the held call's tool, its arguments, and the
    approval's id)."""
    if call.kind == "approval":
        asked = {
            "tool": call.name,
            "arguments": parse_arguments(call.arguments),
            "approval_id": call.id,
        }
        return {
            "id": call.id,
            "type": "function",
            "function": {"name": APPROVAL_TOOL, "arguments": dumps_text(asked)},
        }
    if call.kind == "custom":
        return {
            "id": call.id,
            "type": "custom",
            "custom": {"name": call.name, "input": call.arguments},
        }
    arguments = call.arguments or "{}"
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    }


def turn_message(turn: AssistantMessage) -> dict[str, Any]:
    """An assistant turn as it goes back into the history: only the fields every
    server accepts (no refusal, reasoning or audio fields)."""
    calls = [call_dict(call) for call in turn.calls]
    return {"role": "assistant", "content": turn.content, "tool_calls": calls}


def output_message(output: ToolOutput) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": output.call_id, "content": output.content}


def messages(items: Iterable[HiddenItem]) -> list[dict[str, Any]]:
    """Hidden items as chat messages."""
    return [
        turn_message(i) if isinstance(i, AssistantMessage) else output_message(i) for i in items
    ]


def encode_part(part: Part) -> dict[str, Any]:
    if part.text is None:
        return {"type": part.type, **part.extra}
    return {"type": part.type, "text": part.text, **part.extra}


def encode_message(message: Message) -> dict[str, Any]:
    """A value as the chat message it came from (or the dialect writes for it)."""
    encoded: dict[str, Any] = {"role": message.role}
    content = message.content
    if isinstance(content, str):
        encoded["content"] = content
    elif content is not None:
        encoded["content"] = [encode_part(part) for part in content]
    if message.calls:
        encoded["tool_calls"] = [call_dict(call) for call in message.calls]
    if message.call_id is not None:
        encoded["tool_call_id"] = message.call_id
    if message.extra:
        encoded.update(message.extra)
    return encoded


def encode_messages(history: Iterable[Message]) -> list[dict[str, Any]]:
    """``encode_message`` of each, the common shape written at once."""
    encoded: list[dict[str, Any]] = []
    append = encoded.append
    for message in history:
        # encode_message's common shape, inline (a call a message is most of its cost)
        plain = message.extra is NO_EXTRA and not message.calls and message.call_id is None
        if plain and type(message.content) is str:
            append({"role": message.role, "content": message.content})
        else:
            append(encode_message(message))
    return encoded


# -- tool definitions ---------------------------------------------------------------

_KINDS = ("function", "custom")


def decode_tool(raw: Mapping[str, Any]) -> ToolDefinition:
    """A tool of a request as a value: a function or custom tool whose object holds a
    string ``name`` (the surface checks it does), the rest kept as it came."""
    kind = raw.get("type", "function")
    payload = raw.get(kind) if kind in _KINDS else None
    if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
        return ToolDefinition("", kind="", outer=dict(raw))  # not read: as it came
    description = payload.get("description")
    parameters = payload.get("parameters")
    taken = {"name"}
    if isinstance(description, str):
        taken.add("description")
    else:
        description = None
    if isinstance(parameters, dict) and kind == "function":
        taken.add("parameters")
    else:
        parameters = None
    extra = {k: v for k, v in payload.items() if k not in taken}
    outer = {k: v for k, v in raw.items() if k != "type" and k != kind}
    return ToolDefinition(
        payload["name"], description, parameters, kind, extra or NO_EXTRA, outer or NO_EXTRA
    )


def decode_tools(raw: Iterable[Mapping[str, Any]]) -> tuple[ToolDefinition, ...]:
    return tuple(decode_tool(tool) for tool in raw)


def encode_tool(tool: ToolDefinition) -> dict[str, Any]:
    """A definition as the dialect declares it."""
    if not tool.kind:
        return dict(tool.outer)
    payload: dict[str, Any] = {"name": tool.name}
    if tool.description is not None:
        payload["description"] = tool.description
    if tool.parameters is not None:
        payload["parameters"] = tool.parameters
    if tool.extra:
        payload.update(tool.extra)
    encoded: dict[str, Any] = {"type": tool.kind, tool.kind: payload}
    if tool.outer:
        encoded.update(tool.outer)
    return encoded


def encode_tools(tools: Iterable[ToolDefinition]) -> list[dict[str, Any]]:
    return [encode_tool(tool) for tool in tools]


# -- parameters -----------------------------------------------------------------------

_MODES = ("auto", "none", "required")


def decode_tool_choice(raw: Any) -> ToolChoice:
    """A ``tool_choice`` as a value; a shape not read is kept ``unread``."""
    if raw in _MODES:
        return ToolChoice(raw)
    if not isinstance(raw, dict):
        return ToolChoice(unread=raw)
    kind = raw.get("type")
    if kind in _KINDS and raw.keys() == {"type", kind}:
        named = raw[kind]
        if isinstance(named, dict) and named.keys() == {"name"} and isinstance(named["name"], str):
            return ToolChoice("required", named["name"], kind)
    if kind == "allowed_tools" and raw.keys() == {"type", "allowed_tools"}:
        allowed = raw["allowed_tools"]
        tools = allowed.get("tools") if isinstance(allowed, dict) else None
        mode = allowed.get("mode") if isinstance(allowed, dict) else None
        if isinstance(allowed, dict) and allowed.keys() == {"mode", "tools"} and mode in _MODES:
            names = [_function_name(tool) for tool in tools] if isinstance(tools, list) else None
            if names is not None and all(name is not None for name in names):
                return ToolChoice(str(mode), allowed=tuple(str(name) for name in names))
    return ToolChoice(unread=raw)


def _function_name(tool: Any) -> str | None:
    """The name of ``{"type": "function", "function": {"name": ...}}``, or None."""
    if not isinstance(tool, dict) or tool.keys() != {"type", "function"}:
        return None
    function = tool["function"]
    if tool["type"] != "function" or not isinstance(function, dict) or function.keys() != {"name"}:
        return None
    return function["name"] if isinstance(function["name"], str) else None


def encode_tool_choice(choice: ToolChoice) -> Any:
    if choice.unread is not None:
        return choice.unread
    if choice.name is not None:
        return {"type": choice.kind, choice.kind: {"name": choice.name}}
    if choice.allowed is not None:
        tools = [{"type": "function", "function": {"name": name}} for name in choice.allowed]
        return {"type": "allowed_tools", "allowed_tools": {"mode": choice.mode, "tools": tools}}
    return choice.mode


_SCHEMA_FIELDS = {"name": str, "description": str, "schema": dict, "strict": bool}


def _response_format(raw: Any) -> ResponseFormat | None:
    if not isinstance(raw, dict):
        return None
    kind = raw.get("type")
    if kind in ("text", "json_object") and raw.keys() == {"type"}:
        return ResponseFormat(kind)
    if kind != "json_schema" or raw.keys() != {"type", "json_schema"}:
        return None
    schema = raw["json_schema"]
    if not isinstance(schema, dict) or not schema.keys() <= _SCHEMA_FIELDS.keys():
        return None
    if not all(isinstance(value, _SCHEMA_FIELDS[key]) for key, value in schema.items()):
        return None
    return ResponseFormat(
        "json_schema",
        schema.get("name"),
        schema.get("description"),
        schema.get("schema"),
        schema.get("strict"),
    )


def _encode_response_format(value: ResponseFormat) -> dict[str, Any]:
    if value.kind != "json_schema":
        return {"type": value.kind}
    schema: dict[str, Any] = {}
    for key, field in (
        ("name", value.name),
        ("description", value.description),
        ("schema", value.schema),
        ("strict", value.strict),
    ):
        if field is not None:
            schema[key] = field
    return {"type": "json_schema", "json_schema": schema}


def _number(value: Any) -> float | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _count(value: Any) -> int | None:
    return value if type(value) is int else None


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) else None


_READERS = {
    "temperature": _number,
    "top_p": _number,
    "max_tokens": _count,
    "max_completion_tokens": _count,
    "tool_choice": decode_tool_choice,
    "parallel_tool_calls": _flag,
    "response_format": _response_format,
    "reasoning_effort": _string,
    "user": _string,
}
_NOT_PARAMETERS = frozenset({"messages", "tools"})  # the history's and the tools' own


def decode_parameters(body: Mapping[str, Any]) -> Parameters:
    """A chat request's parameters as a value (its history and tools apart)."""
    typed: dict[str, Any] = {}
    extra: dict[str, object] = {}
    for key, value in body.items():
        if key in _NOT_PARAMETERS:
            continue
        read = _READERS.get(key)
        found = read(value) if read is not None and value is not None else None
        if found is None:
            extra[key] = value
        else:
            typed[key] = found
    return Parameters(**typed, extra=extra or NO_EXTRA)


# Fields of another wire's ``extra`` that chat reads under the same name and meaning.
_SHARED = frozenset({"stop", "seed"})


def encode_parameters(parameters: Parameters) -> dict[str, Any]:
    """The parameters as a chat request's fields; what another surface's client sent
    beyond them (``extra`` of another ``wire``) is not chat's, except ``stop`` and
    ``seed``."""
    encoded: dict[str, Any] = {}
    for key in _READERS:
        value = getattr(parameters, key)
        if value is None:
            continue
        if key == "tool_choice":
            value = encode_tool_choice(value)
        elif key == "response_format":
            value = _encode_response_format(value)
        encoded[key] = value
    if parameters.wire == "openai":
        encoded.update(parameters.extra)
    else:
        encoded.update((k, v) for k, v in parameters.extra.items() if k in _SHARED)
    return encoded
