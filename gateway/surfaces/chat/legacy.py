"""The legacy ``functions`` / ``function_call`` shape of chat completions (docs/design.md §10),
translated to tools on the way in and back on the way out, so old clients get server
tools too.

The legacy shape has no call ids: an assistant message carries one ``function_call``
and the next ``role: "function"`` message answers it. The translation gives each call
the id ``call_legacy_<index>``, from the index of its message in the client's history,
so the id a handed-back call is saved under (``TurnStore``) is the id the client's
return is translated to. A legacy message holds one call: of several client calls the
model makes at once, the first is handed back and the rest are dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from gateway.chat_json import (
    decode_messages,
    decode_parameters,
    decode_tools,
    encode_tools,
)
from gateway.errors import BadRequest
from gateway.surfaces.chat.request import ChatRequest, tool_names

LEGACY_FINISH = "function_call"


def uses_functions(body: Mapping[str, Any]) -> bool:
    """Whether a request is in the legacy shape (its functions, or a legacy history)."""
    if "functions" in body or "function_call" in body:
        return True
    for message in body["messages"]:  # a loop: a long history is walked at every request
        if message.get("role") == "function" or "function_call" in message:
            return True
    return False


def call_id(index: int) -> str:
    """The id of the legacy call of the message at ``index`` in the client's history."""
    return f"call_legacy_{index}"


def _tools(functions: Any) -> list[dict[str, Any]]:
    if functions is None:
        return []
    if not isinstance(functions, list):
        raise BadRequest("'functions' must be an array.", param="functions")
    tools = []
    for index, function in enumerate(functions):
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            param = f"functions[{index}].name"
            raise BadRequest(f"'{param}' is required and must be a string.", param=param)
        tools.append({"type": "function", "function": function})
    return tools


def _tool_choice(function_call: Any) -> Any:
    if function_call in ("auto", "none"):
        return function_call
    if isinstance(function_call, dict) and isinstance(function_call.get("name"), str):
        return {"type": "function", "function": {"name": function_call["name"]}}
    raise BadRequest(
        "'function_call' must be 'auto', 'none' or an object naming a function.",
        param="function_call",
    )


def _messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    translated = []
    answering: str | None = None  # the id of the legacy call last made
    for index, message in enumerate(messages):
        role = message.get("role")
        call = message.get("function_call")
        if role == "assistant" and call is not None:
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                param = f"messages[{index}].function_call"
                raise BadRequest(f"'{param}' must be an object naming a function.", param=param)
            answering = call_id(index)
            arguments = call.get("arguments")
            function = {
                "name": call["name"],
                "arguments": arguments if isinstance(arguments, str) else "{}",
            }
            rest = {k: v for k, v in message.items() if k != "function_call"}
            calls = [{"id": answering, "type": "function", "function": function}]
            translated.append({**rest, "tool_calls": calls})
        elif role == "function":
            content = message.get("content")
            translated.append(
                {
                    "role": "tool",
                    "tool_call_id": answering or call_id(index - 1),
                    "content": content if isinstance(content, str) else "",
                }
            )
            answering = None
        else:
            translated.append(message)
    return translated


def from_functions(chat: ChatRequest) -> ChatRequest:
    """The request with its functions as client tools and its history in tool calls."""
    body = dict(chat.body)
    tools = (*chat.client_tools, *decode_tools(_tools(body.pop("functions", None))))
    if tools:
        body["tools"] = encode_tools(tools)
    if "function_call" in body:
        body["tool_choice"] = _tool_choice(body.pop("function_call"))
    body["messages"] = _messages(body["messages"])
    messages = decode_messages(body["messages"])
    names = tool_names(tools)
    single = call_id(len(chat.body["messages"]))
    return replace(
        chat,
        body=MappingProxyType(body),
        messages=messages,
        parameters=decode_parameters(body),
        client_tools=tools,
        client_tool_names=names,
        changed=True,
        single_call_id=single,
    )


def legacy_call(call: dict[str, Any]) -> dict[str, Any]:
    """A tool call's function as a legacy ``function_call``."""
    function = call.get("function") or {}
    return {"name": function.get("name", ""), "arguments": function.get("arguments", "")}


def to_function_call(completion: dict[str, Any]) -> dict[str, Any]:
    """A final completion in the legacy shape: a handed-back call as ``function_call``."""
    for choice in completion.get("choices", []):
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            continue
        calls = message.pop("tool_calls", None)
        if calls:
            message["function_call"] = legacy_call(calls[0])
            choice["finish_reason"] = LEGACY_FINISH
    return completion
