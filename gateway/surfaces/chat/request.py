"""Reading a chat-completion request: lenient about what it passes on, strict about
what the gateway itself relies on (see docs/design.md §2, §5)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from gateway.chat_json import decode_history, decode_parameters, decode_tools
from gateway.errors import BadRequest
from gateway.policy.limits import Narrowing
from gateway.surfaces.request_fields import model_request, parse_narrowing, user_text
from gateway.values import APPROVAL_TOOL, Message, Parameters, ToolDefinition
from tool_registry import immutable


@immutable
class ChatRequest:
    body: Mapping[str, Any]  # as the client sent it, less the ``toolgate`` field: read-only
    messages: tuple[Message, ...]  # its ``messages``, decoded
    parameters: Parameters  # the rest of what it asks of the model, decoded
    model: str
    stream: bool
    client_tools: tuple[ToolDefinition, ...]  # its ``tools``, decoded
    client_tool_names: frozenset[str]
    narrowing: Narrowing
    changed: bool  # the body differs from the bytes received
    single_call_id: str | None = None  # the legacy shape: one call handed back, this id
    # The client sent a ``toolgate_approval`` tool: it approves held calls itself
    # (docs/design.md §13). The tool is the gateway's, never offered to the model.
    client_approves: bool = False

    def user_text(self) -> str:
        return user_text(self.messages)


def _messages(messages: Any) -> tuple[Message, ...]:
    """The history, decoded: each message an object with a string role (one pass)."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty array.", param="messages")
    decoded = decode_history(messages)
    if not isinstance(decoded, int):
        return decoded
    if not isinstance(messages[decoded], dict):
        raise BadRequest(f"'messages[{decoded}]' must be an object.", param=f"messages[{decoded}]")
    param = f"messages[{decoded}].role"
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


def tool_names(tools: tuple[ToolDefinition, ...]) -> frozenset[str]:
    """The names of the tools that have one (a function or custom tool)."""
    return frozenset(tool.name for tool in tools if tool.name)


def parse_chat_request(raw: bytes, headers: Mapping[str, str]) -> ChatRequest:
    """Check the fields the gateway relies on; everything else passes through untouched."""
    body, model = model_request(raw)
    messages = _messages(body.get("messages"))
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise BadRequest("'stream' must be a boolean.", param="stream")
    tools = _client_tools(body.get("tools"))
    changed = "toolgate" in body
    approves = any(client_tool_name(t) == APPROVAL_TOOL for t in tools)
    if approves:
        tools = [t for t in tools if client_tool_name(t) != APPROVAL_TOOL]
        _without_approval_tool(body, tools)
        changed = True
    client_tools = decode_tools(tools)
    names = tool_names(client_tools)
    narrowing = parse_narrowing(body.pop("toolgate", None), headers)
    return ChatRequest(
        MappingProxyType(body),
        messages,
        decode_parameters(body),
        model,
        bool(stream),
        client_tools,
        names,
        narrowing,
        changed,
        client_approves=approves,
    )


def _without_approval_tool(body: dict[str, Any], tools: list[dict[str, Any]]) -> None:
    """The request as the model sees it: the approval tool is the gateway's."""
    if tools:
        body["tools"] = tools
        return
    del body["tools"]
    for key in ("tool_choice", "parallel_tool_calls"):
        body.pop(key, None)
