"""Reading a chat-completion request: lenient about what it passes on, strict about
what the gateway itself relies on (see DESIGN.md §2, §5)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tool_registry.jsonio import loads

from .errors import BadRequest

_NARROWING_KEYS = frozenset({"tools", "max_iterations", "max_tool_calls"})


@dataclass(frozen=True, slots=True)
class Narrowing:
    """What one request asks to narrow: never wider than the tenant's policy."""

    tools: frozenset[str] | None = None
    max_iterations: int | None = None
    max_tool_calls: int | None = None


@dataclass(frozen=True, slots=True)
class ChatRequest:
    body: dict[str, Any]  # as the client sent it, less the ``toolgate`` field
    model: str
    stream: bool
    client_tools: list[dict[str, Any]]
    client_tool_names: frozenset[str]
    narrowing: Narrowing
    changed: bool  # the body differs from the bytes received


def _positive_int(value: Any, param: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BadRequest(f"'{param}' must be an integer of at least {minimum}.", param=param)
    return value


def _header_int(headers: Mapping[str, str], name: str, minimum: int) -> int | None:
    raw = headers.get(name)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        value = minimum - 1
    return _positive_int(value, name, minimum)


def _narrowest(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _tool_names(value: Any, param: str) -> frozenset[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRequest(f"'{param}' must be a list of tool names.", param=param)
    return frozenset(value)


def parse_narrowing(field: Any, headers: Mapping[str, str]) -> Narrowing:
    """Narrowing from the ``toolgate`` body field and ``x-toolgate-*`` headers together."""
    tools: frozenset[str] | None = None
    iterations = _header_int(headers, "x-toolgate-max-iterations", 1)
    calls = _header_int(headers, "x-toolgate-max-tool-calls", 0)
    header_tools = headers.get("x-toolgate-tools")
    if header_tools is not None:
        tools = frozenset(t.strip() for t in header_tools.split(",") if t.strip())
    if field is not None:
        if not isinstance(field, dict):
            raise BadRequest("'toolgate' must be an object.", param="toolgate")
        unknown = sorted(set(field) - _NARROWING_KEYS)
        if unknown:
            raise BadRequest(f"'toolgate.{unknown[0]}' is not a known field.", param="toolgate")
        if "tools" in field:
            body_tools = _tool_names(field["tools"], "toolgate.tools")
            tools = body_tools if tools is None else tools & body_tools
        if "max_iterations" in field:
            value = _positive_int(field["max_iterations"], "toolgate.max_iterations", 1)
            iterations = _narrowest(iterations, value)
        if "max_tool_calls" in field:
            value = _positive_int(field["max_tool_calls"], "toolgate.max_tool_calls", 0)
            calls = _narrowest(calls, value)
    return Narrowing(tools, iterations, calls)


def _check_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty array.", param="messages")
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise BadRequest(f"'messages[{index}]' must be an object.", param=f"messages[{index}]")
        if not isinstance(message.get("role"), str):
            param = f"messages[{index}].role"
            raise BadRequest(f"'{param}' is required and must be a string.", param=param)


def _client_tools(tools: Any) -> list[dict[str, Any]]:
    """The request's own tools: each an object with a string ``type``; a ``function``
    or ``custom`` tool names itself in an object of that key."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise BadRequest("'tools' must be an array.", param="tools")
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise BadRequest(f"'tools[{index}]' must be an object.", param=f"tools[{index}]")
        kind = tool.get("type", "function")
        if not isinstance(kind, str):
            param = f"tools[{index}].type"
            raise BadRequest(f"'{param}' must be a string.", param=param)
        if kind in ("function", "custom"):
            spec = tool.get(kind)
            if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
                param = f"tools[{index}].{kind}.name"
                raise BadRequest(f"'{param}' is required and must be a string.", param=param)
    return tools


def client_tool_name(tool: dict[str, Any]) -> str | None:
    """The name of a client tool (checked by ``_client_tools``), or None for a type
    that carries none."""
    kind = tool.get("type", "function")
    spec = tool.get(kind) if isinstance(kind, str) else None
    name = spec.get("name") if isinstance(spec, dict) else None
    return name if isinstance(name, str) else None


def model_request(raw: bytes) -> tuple[dict[str, Any], str]:
    """A request body that is a JSON object naming a model (any API surface's first check)."""
    try:
        body = loads(raw)
    except ValueError as exc:
        raise BadRequest("The request body is not valid JSON.") from exc
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("'model' is required and must be a non-empty string.", param="model")
    return body, model


def parse_chat_request(raw: bytes, headers: Mapping[str, str]) -> ChatRequest:
    """Check the fields the gateway relies on; everything else passes through untouched."""
    body, model = model_request(raw)
    _check_messages(body.get("messages"))
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise BadRequest("'stream' must be a boolean.", param="stream")
    client_tools = _client_tools(body.get("tools"))
    names = frozenset(n for n in (client_tool_name(t) for t in client_tools) if n is not None)
    changed = "toolgate" in body
    narrowing = parse_narrowing(body.pop("toolgate", None), headers)
    return ChatRequest(body, model, bool(stream), client_tools, names, narrowing, changed)
