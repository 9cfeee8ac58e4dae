"""Items of the Responses API (docs/design.md §11): the client's input turned into
messages (``values.Message``), and the loop's outcome turned into output items.

Pure: no I/O. What the client sends is checked where the gateway relies on it; a
shape it cannot carry to a chat-completions upstream is a 400 naming where it is.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gateway.errors import BadRequest
from gateway.values import (
    APPROVAL_TOOL,
    NULL_CONTENT,
    AssistantMessage,
    Message,
    Part,
    ToolCall,
    ToolDefinition,
)
from tool_registry import dumps, dumps_each, immutable, loads_object, tool_name

APPROVAL_SERVER_LABEL = "toolgate"  # an approval request's ``server_label``: the gateway


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


def input_items(value: Any) -> list[dict[str, Any]]:
    """``input`` as a list of items: a string is one user message."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    if not isinstance(value, list):
        raise BadRequest("'input' must be a string or an array of items.", param="input")
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise BadRequest(f"'input[{index}]' must be an object.", param=f"input[{index}]")
    return value


def _text_of(part: dict[str, Any], where: str) -> str:
    text = part.get("text") if "text" in part else part.get("refusal")
    if not isinstance(text, str):
        raise BadRequest(f"'{where}.text' must be a string.", param=f"{where}.text")
    return text


_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "refusal", "summary_text"})


def _content(content: Any, where: str) -> str | tuple[Part, ...]:
    """A message's content: text, or parts when it holds an image."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequest(f"'{where}' must be a string or an array.", param=where)
    parts: list[Part] = []
    for index, part in enumerate(content):
        at = f"{where}[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(part, dict) or not isinstance(kind, str):
            raise BadRequest(f"'{at}' must be an object with a 'type'.", param=at)
        if kind in _TEXT_PARTS:
            parts.append(Part("text", _text_of(part, at)))
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            parts.append(image_part(part["image_url"], part.get("detail")))
        else:
            raise BadRequest(
                f"'{at}': content of type {kind!r} cannot be sent to this model "
                "(text, and images by URL, can).",
                param=f"{at}.type",
            )
    if all(part.text is not None for part in parts):
        return "".join(part.text or "" for part in parts)
    return tuple(parts)


_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


def to_messages(items: list[dict[str, Any]], where: str = "input") -> list[Message]:
    """Input items as messages. A ``function_call`` (a custom tool's, a client tool
    search's) joins the assistant message before it (a turn's calls are on its
    message); reasoning items are the upstream's own and are left out."""
    messages: list[Message] = []
    for index, item in enumerate(items):
        at = f"{where}[{index}]"
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            role = _ROLES.get(role) if isinstance(role, str) else None
            if role is None:
                raise BadRequest(
                    f"'{at}.role' must be one of user, assistant, system, developer.",
                    param=f"{at}.role",
                )
            messages.append(Message(role, _content(item.get("content"), f"{at}.content")))
        elif kind in ("function_call", "custom_tool_call", "tool_search_call"):
            search = kind == "tool_search_call"
            call = _search_call_of(item, at) if search else _call_of(item, kind, at)
            last = messages[-1] if messages else None
            if last is not None and last.role == "assistant":
                messages[-1] = replace(last, calls=(*last.calls, call))
            else:
                messages.append(Message("assistant", None, (call,), extra=NULL_CONTENT))
        elif kind == "tool_search_output":
            messages.append(_search_output_of(item, at))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id, output = item.get("call_id"), item.get("output")
            if not isinstance(call_id, str):
                raise BadRequest(f"'{at}.call_id' must be a string.", param=f"{at}.call_id")
            if not isinstance(output, str):
                output = _content(output, f"{at}.output")
                if not isinstance(output, str):
                    raise BadRequest(f"'{at}.output' must be text.", param=f"{at}.output")
            messages.append(Message("tool", output, call_id=call_id))
        elif kind == "mcp_approval_request":
            messages.append(_approval_asked(item, at))
        elif kind == "mcp_approval_response":
            messages.append(_approval_answer(item, at))
        elif kind == "reasoning":
            continue
        else:
            raise BadRequest(
                f"'{at}': items of type {kind!r} are not supported by this gateway.",
                param=f"{at}.type",
            )
    return messages


def image_part(url: str, detail: Any = None) -> Part:
    """An image by URL (its ``detail``, if it is one of OpenAI's)."""
    image = {"url": url}
    if isinstance(detail, str) and detail in ("low", "high", "auto"):
        image["detail"] = detail
    return Part("image_url", None, {"image_url": image})


def _approval_asked(item: dict[str, Any], at: str) -> Message:
    """An ``mcp_approval_request`` the client sends back: the call of the gateway's
    approval tool it stands for (``surfaces.approval_answers`` reads it, the model
    never)."""
    approval_id, name, arguments = item.get("id"), item.get("name"), item.get("arguments")
    if not (isinstance(approval_id, str) and isinstance(name, str) and isinstance(arguments, str)):
        raise BadRequest(f"'{at}' needs string 'id', 'name' and 'arguments'.", param=at)
    asked = {"tool": name, "arguments": arguments, "approval_id": approval_id}
    call = ToolCall(approval_id, APPROVAL_TOOL, dumps(asked).decode())
    return Message("assistant", None, (call,), extra=NULL_CONTENT)


def _approval_answer(item: dict[str, Any], at: str) -> Message:
    """An ``mcp_approval_response``: the answer, as a result of that approval call."""
    approval_id, approve, reason = (
        item.get("approval_request_id"),
        item.get("approve"),
        item.get("reason"),
    )
    if not isinstance(approval_id, str) or not isinstance(approve, bool):
        raise BadRequest(
            f"'{at}' needs a string 'approval_request_id' and a boolean 'approve'.", param=at
        )
    if reason is not None and not isinstance(reason, str):
        raise BadRequest(f"'{at}.reason' must be a string.", param=f"{at}.reason")
    answer = dumps({"approve": approve, "reason": reason}).decode()
    return Message("tool", answer, call_id=approval_id)


def approval_answers(items: list[dict[str, Any]]) -> set[str]:
    """The approval ids the input's ``mcp_approval_response`` items answer."""
    return {
        item["approval_request_id"]
        for item in items
        if item.get("type") == "mcp_approval_response"
        and isinstance(item.get("approval_request_id"), str)
    }


def _call_of(item: dict[str, Any], kind: str, at: str) -> ToolCall:
    """A ``function_call`` or ``custom_tool_call`` item as the model's tool call, under
    the name and shape the model was offered it in (a namespaced name; a custom tool's
    ``input`` as its one argument)."""
    call_id, name = item.get("call_id"), item.get("name")
    field = "arguments" if kind == "function_call" else "input"
    value = item.get(field, "")
    if not isinstance(call_id, str) or not isinstance(name, str) or not isinstance(value, str):
        raise BadRequest(f"'{at}' needs string 'call_id', 'name' and '{field}'.", param=at)
    namespace = item.get("namespace")
    if isinstance(namespace, str) and namespace:
        name = qualified(namespace, name)
    arguments = value if kind == "function_call" else dumps({"input": value}).decode()
    return ToolCall(call_id, name, arguments)


CLIENT_SEARCH = "tool_search"  # a client-executed tool search, as a chat model is offered it
_SEARCH_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "What the tools you need do."},
        "limit": {"type": "number", "description": "How many tools, at most."},
    },
    "required": ["query"],
    "additionalProperties": False,
}


def client_search(tool: dict[str, Any], at: str, names: dict[str, ClientName]) -> ToolDefinition:
    """A client's own ``tool_search`` as the function a chat model is offered (its
    description and parameters, or the gateway's), named in ``names``."""
    about, parameters = tool.get("description"), tool.get("parameters")
    if about is not None and not isinstance(about, str):
        raise BadRequest(f"'{at}.description' must be a string.", param=f"{at}.description")
    if parameters is not None and not isinstance(parameters, dict):
        raise BadRequest(f"'{at}.parameters' must be an object.", param=f"{at}.parameters")
    names[CLIENT_SEARCH] = ClientName(CLIENT_SEARCH, search=True)
    about = about or "Search for tools that were not offered to you yet; those found are."
    return ToolDefinition(CLIENT_SEARCH, about, parameters or _SEARCH_PARAMETERS)


def _search_call_of(item: dict[str, Any], at: str) -> ToolCall:
    """A ``tool_search_call`` item (a client-executed search) as the model's call of the
    ``tool_search`` function it was offered."""
    call_id = item.get("call_id")
    if call_id is None:
        call_id = item.get("id")
    arguments = item.get("arguments", {})
    if not isinstance(call_id, str) or not isinstance(arguments, dict):
        raise BadRequest(f"'{at}' needs a string 'call_id' and object 'arguments'.", param=at)
    return ToolCall(call_id, CLIENT_SEARCH, dumps(arguments).decode())


def loaded_tools(item: dict[str, Any], at: str) -> list[Any]:
    """The tool definitions a ``tool_search_output`` item loaded."""
    tools = item.get("tools", [])
    if not isinstance(tools, list):
        raise BadRequest(f"'{at}.tools' must be an array.", param=f"{at}.tools")
    return tools


def _search_output_of(item: dict[str, Any], at: str) -> Message:
    """A ``tool_search_output`` item as what the model reads of its search: the names
    of the tools it loaded (as the model is offered them), which are offered from then
    on (``request._tools`` reads their definitions)."""
    call_id = item.get("call_id")
    if call_id is None:
        call_id = item.get("id")
    if not isinstance(call_id, str):
        raise BadRequest(f"'{at}.call_id' must be a string.", param=f"{at}.call_id")
    names: list[str] = []
    for tool in loaded_tools(item, at):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            continue
        inner = tool.get("tools")
        if tool.get("type") == "namespace" and isinstance(inner, list):
            names += [
                qualified(tool["name"], member["name"])
                for member in inner
                if isinstance(member, dict) and isinstance(member.get("name"), str)
            ]
        else:
            names.append(tool["name"])
    note = "These tools are loaded: call them by name." if names else "No tool was found."
    return Message("tool", dumps({"loaded": names, "note": note}).decode(), call_id=call_id)


def message_item(turn: AssistantMessage, item_id: str, status: str = "completed") -> dict[str, Any]:
    """The assistant's text (or refusal) as an output ``message`` item."""
    content: list[dict[str, Any]] = []
    if turn.refusal:
        content.append({"type": "refusal", "refusal": turn.refusal})
    if turn.content or not content:
        text = turn.content or ""
        content.append({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def qualified(namespace: str, name: str) -> str:
    """The one name a function of a ``namespace`` tool has for a chat model, which
    knows no namespaces: ``namespace__name``, within 64 characters and the characters
    OpenAI allows (a hash of the whole ends a long one)."""
    return tool_name(f"{namespace}__", name)


@immutable
class ClientName:
    """How the client named a tool that a chat model knows by another name or shape:
    its own name, its namespace, and whether it is a ``custom`` (freeform) tool, which
    the model knows as a function of one string ``input``."""

    name: str
    namespace: str | None = None
    custom: bool = False
    search: bool = False  # the client's ``tool_search`` (``execution: client``)


# A request's client tools that the model knows otherwise: the model's name → the client's.
ClientNames = Mapping[str, ClientName]


def custom_input(arguments: str) -> str:
    """A custom tool's input from the arguments the model wrote for its one-string
    function: ``input``; the one string a model wrote under another name; else the
    arguments as written (the client's tool judges its own input)."""
    value = loads_object(arguments)
    if value is not None:
        if isinstance(value.get("input"), str):
            return str(value["input"])
        if len(value) == 1:
            [only] = value.values()
            if isinstance(only, str):
                return only
    return arguments


def call_item(
    call: ToolCall, item_id: str, status: str = "completed", names: ClientNames | None = None
) -> dict[str, Any]:
    """A client call handed back in the shape the client's tool has: a
    ``function_call`` item, or a ``custom_tool_call`` with its ``input``; a namespaced
    tool's call with its ``namespace`` and own name; a held call the client is to
    approve as an ``mcp_approval_request`` (under the approval's id)."""
    if call.kind == "approval":
        return {
            "id": call.id,
            "type": "mcp_approval_request",
            "server_label": APPROVAL_SERVER_LABEL,
            "name": call.name or "",
            "arguments": call.arguments,
        }
    named = names.get(call.name) if names and call.name else None
    item: dict[str, Any]
    if named is not None and named.search:
        arguments = loads_object(call.arguments)
        return {
            "id": item_id,
            "type": "tool_search_call",
            "call_id": call.id,
            "execution": "client",
            "arguments": arguments if arguments is not None else {},
            "status": "completed",
        }
    if named is not None and named.custom:
        item = {"id": item_id, "type": "custom_tool_call", "call_id": call.id}
        item |= {"name": named.name, "input": custom_input(call.arguments)}
    else:
        item = {
            "id": item_id,
            "type": "function_call",
            "status": status,
            "call_id": call.id,
            "name": named.name if named else call.name or "",
            "arguments": call.arguments,
        }
    if named is not None and named.namespace is not None:
        item["namespace"] = named.namespace
    return item


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def usage_of(totals: Mapping[str, Any]) -> dict[str, Any]:
    """Chat-completions usage, summed over the rounds, as the Responses API counts it."""
    prompt = totals.get("prompt_tokens_details")
    completion = totals.get("completion_tokens_details")
    cached = _int(prompt.get("cached_tokens")) if isinstance(prompt, dict) else 0
    reasoning = _int(completion.get("reasoning_tokens")) if isinstance(completion, dict) else 0
    input_tokens, output_tokens = (
        _int(totals.get("prompt_tokens")),
        _int(totals.get("completion_tokens")),
    )
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": _int(totals.get("total_tokens")) or input_tokens + output_tokens,
    }


_ID_PREFIXES = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "custom_tool_call": "ctc",
    "custom_tool_call_output": "ctco",
    "tool_search_call": "tsc",
    "tool_search_output": "tso",
}
# Items whose stored form carries a ``status`` (a custom tool call's has none).
_STATUS = frozenset({"message", "function_call", "function_call_output", "custom_tool_call_output"})


def stored_items(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Input items as ``input_items`` lists them: each with an id (a list is paged by
    ids, whatever kind of item the client sent), messages with parts."""
    return [_stored(item) for item in items]


def stored_items_json(items: list[dict[str, Any]]) -> bytes:
    """``stored_items`` as the JSON array the store keeps, written item by item: a long
    session's items are never all held as new objects at once (a few hundred bytes each,
    beside the request's own)."""
    return dumps_each(items, _stored)


def _stored(item: dict[str, Any]) -> dict[str, Any]:
    item = dict(item)
    kind = item.setdefault("type", "message")
    content = item.get("content")
    if kind == "message" and isinstance(content, str):
        part = "output_text" if item.get("role") == "assistant" else "input_text"
        text_part: dict[str, Any] = {"type": part, "text": content}
        if part == "output_text":
            text_part |= {"annotations": [], "logprobs": []}
        item["content"] = [text_part]
    if not isinstance(item.get("id"), str):
        item["id"] = new_id(_ID_PREFIXES.get(kind, "item"))
    if kind in _STATUS:
        item.setdefault("status", "completed")
    return item
