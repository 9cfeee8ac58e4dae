"""Reading a Responses API request (docs/design.md §11) into what the loop needs: what it
asks of the model (``Parameters``) and the client's own tools, as values. A parameter the gateway
cannot honour is a 400 naming it, never dropped in silence."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import field, replace
from types import MappingProxyType
from typing import Any

from gateway.errors import BadRequest
from gateway.policy.background import last_user_text
from gateway.policy.limits import Narrowing
from gateway.surfaces.request_fields import model_request, parse_narrowing
from gateway.surfaces.responses.items import (
    ClientName,
    client_search,
    input_items,
    loaded_tools,
    qualified,
)
from gateway.values import NO_EXTRA, Parameters, ResponseFormat, ToolChoice, ToolDefinition
from tool_registry import immutable


@immutable
class Hosted:
    """A hosted tool the client sent: where in ``tools``, and its type."""

    index: int
    type: str


@immutable
class ResponsesRequest:
    body: Mapping[str, Any]  # as the client sent it, less the ``toolgate`` field: read-only
    model: str
    stream: bool
    items: list[dict[str, Any]]  # ``input`` as items
    instructions: str | None
    params: Parameters  # what it asks of the model, besides its input and tools
    client_tools: tuple[ToolDefinition, ...]  # as a chat model is offered them
    client_tool_names: frozenset[str]
    narrowing: Narrowing
    store: bool
    previous_response_id: str | None
    conversation: str | None = None
    hosted: tuple[Hosted, ...] = ()  # hosted tool types in ``tools``
    # ``custom`` tools and the tools of a ``namespace``: the name the model knows → the
    # client's name (and shape) for it.
    client_names: Mapping[str, ClientName] = field(default_factory=dict)
    # The client approves held calls (``mcp_approval_request`` and ``_response`` items).
    client_approves: bool = True

    def user_text(self) -> str:
        return last_user_text(self.items)


# Honoured by a hosted model only, or not at all here: a 400, not a silent change.
_REFUSED = {
    "background": "background responses are not supported by this gateway",
    "prompt": "prompt templates are not supported by this gateway",
    "top_logprobs": "top_logprobs is not supported by this gateway",
}


def _refuse(body: dict[str, Any]) -> None:
    for name, reason in _REFUSED.items():
        value = body.get(name)
        if value is None or value is False or value == 0 or value == []:
            continue
        raise BadRequest(f"'{name}': {reason}.", param=name)
    if body.get("truncation") not in (None, "disabled", "auto"):
        raise BadRequest("'truncation' must be 'auto' or 'disabled'.", param="truncation")
    management = body.get("context_management")
    if management is not None:
        entries = management if isinstance(management, list) else [None]
        for index, entry in enumerate(entries):
            kind = entry.get("type") if isinstance(entry, dict) else None
            threshold = entry.get("compact_threshold") if isinstance(entry, dict) else None
            if kind != "compaction" or not (
                threshold is None or (isinstance(threshold, int) and threshold > 0)
            ):
                param = f"context_management[{index}]"
                raise BadRequest(
                    f"'{param}' must be {{type: compaction, compact_threshold: <tokens>}}.",
                    param=param,
                )


_TOKEN = re.compile(r"[A-Za-z0-9_.-]{1,64}")

# Tool types the gateway offers a model as they are, or will: not a hosted tool.
_NOT_HOSTED = frozenset({"function", "custom", "namespace"})


def _tools(
    value: Any, items: list[dict[str, Any]]
) -> tuple[list[ToolDefinition], dict[str, ClientName], list[Hosted]]:
    """The client's tools as a chat model is offered them — a ``custom`` tool as a function
    of one string, a ``namespace``'s tools flattened under ``qualified`` names, its own
    ``tool_search`` (``execution: client``) as a function whose calls go back as
    ``tool_search_call`` items — the names the model knows for those, and the hosted
    tools (``web_search``, ``file_search``, ...: types a hosted model runs), which the
    tenant's ``hosted_tools`` decides about. With its own tool search, a client's
    ``defer_loading`` tools are offered once a ``tool_search_output`` of ``items`` has
    loaded them (its definitions are the ones offered)."""
    if value is None:
        return [], {}, []
    if not isinstance(value, list):
        raise BadRequest("'tools' must be an array.", param="tools")
    tools: list[ToolDefinition] = []
    names: dict[str, ClientName] = {}
    hosted = []
    searching = any(
        isinstance(tool, dict)
        and tool.get("type") == "tool_search"
        and tool.get("execution") == "client"
        for tool in value
    )
    for index, tool in enumerate(value):
        at = f"tools[{index}]"
        kind = tool.get("type") if isinstance(tool, dict) else None
        if searching and kind == "tool_search":
            tools.append(client_search(tool, at, names))
        elif searching and isinstance(tool, dict) and tool.get("defer_loading") is True:
            continue  # loaded by the client's search, below
        elif isinstance(kind, str) and kind not in _NOT_HOSTED:
            # Named in a response header and a message: a type that is no plain token
            # (a newline, a megabyte) is named as what it is not.
            hosted.append(Hosted(index, kind if _TOKEN.fullmatch(kind) else "unnamed"))
        elif kind == "namespace":
            _namespace(tool, at, tools, names)
        else:
            tools.append(_declared(tool, at, kind, names))
    if searching:
        tools += _loaded(items, names, {tool.name for tool in tools})
    counts = Counter(tool.name for tool in tools)  # linear: thousands fit
    twice = sorted(n for n in names if counts[n] > 1)
    if twice:
        raise BadRequest(f"'tools': two tools are named {twice[0]!r}.", param="tools")
    return tools, names, hosted


def _loaded(
    items: list[dict[str, Any]], names: dict[str, ClientName], offered: set[str]
) -> list[ToolDefinition]:
    """The tools the input's ``tool_search_output`` items loaded, as a chat model is
    offered them (a tool loaded twice, or declared already, once)."""
    loaded: list[ToolDefinition] = []
    for index, item in enumerate(items):
        if item.get("type") != "tool_search_output":
            continue
        for number, tool in enumerate(loaded_tools(item, f"input[{index}]")):
            at = f"input[{index}].tools[{number}]"
            kind = tool.get("type") if isinstance(tool, dict) else None
            found: list[ToolDefinition] = []
            if kind == "namespace":
                _namespace(tool, at, found, names)
            else:
                found.append(_declared(tool, at, kind, names))
            for definition in found:
                if definition.name not in offered:
                    offered.add(definition.name)
                    loaded.append(definition)
    return loaded


def _declared(
    tool: Any, at: str, kind: Any, names: dict[str, ClientName], namespace: str | None = None
) -> ToolDefinition:
    """A client ``function`` or ``custom`` tool as a chat model is offered it (a custom
    one, and one in ``namespace``, also named in ``names``)."""
    if kind not in ("function", "custom"):
        raise BadRequest(
            f"'{at}.type': only 'function' and 'custom' tools are supported here, "
            f"not {kind!r} (its own tools are the tenant's server tools).",
            param=f"{at}.type",
        )
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise BadRequest(f"'{at}.name' is required and must be a string.", param=f"{at}.name")
    if namespace is not None and not _MEMBER_NAME.fullmatch(name):
        raise BadRequest(
            f"'{at}.name' must be letters, digits, '_' and '-' (at most 128).",
            param=f"{at}.name",
        )
    offered = name if namespace is None else qualified(namespace, name)
    if kind == "custom" or namespace is not None:
        names[offered] = ClientName(name, namespace, kind == "custom")
    if kind == "custom":
        description, parameters = _freeform(tool, at)
        return ToolDefinition(offered, description, parameters)
    fields: dict[str, Any] = {}
    for key, kinds in _FIELDS.items():
        value = tool.get(key)
        if value is None:
            continue
        if not isinstance(value, kinds):
            raise BadRequest(f"'{at}.{key}' must be {_FIELD_NAMES[key]}.", param=f"{at}.{key}")
        fields[key] = value
    strict = {"strict": fields["strict"]} if "strict" in fields else NO_EXTRA
    return ToolDefinition(
        offered, fields.get("description"), fields.get("parameters"), extra=strict
    )


# A function tool's fields a chat model is offered, and what each must be.
_FIELDS: dict[str, type | tuple[type, ...]] = {
    "description": str,
    "parameters": dict,
    "strict": bool,
}
_FIELD_NAMES = {
    "description": "a string",
    "parameters": "a JSON Schema object",
    "strict": "a boolean",
}
_MEMBER_NAME = re.compile(r"[A-Za-z0-9_-]{1,128}")  # a namespace's tools, as OpenAI's
_SYNTAXES = frozenset({"lark", "regex"})


def _freeform(tool: dict[str, Any], at: str) -> tuple[str | None, dict[str, Any]]:
    """A ``custom`` tool's description and parameters as a function of one string: its
    description, and the grammar ``input`` must follow, are what the model reads."""
    about = tool.get("description")
    lines = [about] if isinstance(about, str) and about else []
    fmt = tool.get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "grammar":
        syntax, definition = fmt.get("syntax"), fmt.get("definition")
        if syntax not in _SYNTAXES or not isinstance(definition, str):
            raise BadRequest(
                f"'{at}.format' must be a grammar with a 'syntax' (lark or regex) and a "
                "string 'definition'.",
                param=f"{at}.format",
            )
        lines.append(f"`input` must follow this {syntax} grammar:\n{definition}")
    elif fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise BadRequest(
            f"'{at}.format' must be {{type: text}} or {{type: grammar}}.", param=f"{at}.format"
        )
    parameters = {
        "type": "object",
        "properties": {"input": {"type": "string", "description": "The tool's whole input."}},
        "required": ["input"],
        "additionalProperties": False,
    }
    return ("\n\n".join(lines) if lines else None), parameters


def _namespace(
    tool: dict[str, Any], at: str, tools: list[ToolDefinition], names: dict[str, ClientName]
) -> None:
    """A ``namespace`` tool's tools, added to ``tools`` under their qualified names (its
    description before each of theirs) and named in ``names``."""
    namespace, inner = tool.get("name"), tool.get("tools")
    if not isinstance(namespace, str) or not namespace:
        raise BadRequest(f"'{at}.name' is required and must be a string.", param=f"{at}.name")
    if not isinstance(inner, list) or not inner:
        raise BadRequest(f"'{at}.tools' must be a non-empty array.", param=f"{at}.tools")
    about = tool.get("description")
    for index, member in enumerate(inner):
        where = f"{at}.tools[{index}]"
        kind = member.get("type") if isinstance(member, dict) else None
        declared = _declared(member, where, kind, names, namespace)
        if isinstance(about, str) and about:
            described = f"{about}\n\n{declared.description or ''}".strip()
            declared = replace(declared, description=described)
        tools.append(declared)


def _tool_choice(value: Any) -> ToolChoice:
    if value in ("auto", "none", "required"):
        return ToolChoice(value)
    kind = value.get("type") if isinstance(value, dict) else None
    if kind in ("function", "custom") and isinstance(value.get("name"), str):
        return ToolChoice("required", value["name"])  # a custom tool is a function here
    if kind == "allowed_tools" and isinstance(value.get("tools"), list):
        names = [t.get("name") for t in value["tools"] if isinstance(t, dict)]
        allowed = tuple(name for name in names if isinstance(name, str))
        if len(allowed) == len(names):
            return ToolChoice(value.get("mode", "auto"), allowed=allowed)
    raise BadRequest(
        "'tool_choice' must be 'auto', 'none', 'required', a function or custom tool, or "
        "allowed tools.",
        param="tool_choice",
    )


def _response_format(text: Any) -> ResponseFormat | None:
    if text is None:
        return None
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(text, dict) or (fmt is not None and not isinstance(fmt, dict)):
        raise BadRequest("'text' must be an object with an object 'format'.", param="text")
    kind = fmt.get("type") if fmt else "text"
    if kind == "text":
        return None
    if kind == "json_object":
        return ResponseFormat("json_object")
    if kind == "json_schema" and fmt is not None and isinstance(fmt.get("schema"), dict):
        name, description, strict = (
            fmt.get("name", "response"),
            fmt.get("description"),
            fmt.get("strict"),
        )
        return ResponseFormat("json_schema", name, description, fmt["schema"], strict)
    raise BadRequest(
        "'text.format' must be text, json_object, or json_schema with a 'schema'.",
        param="text.format",
    )


_RANGES = {"temperature": 2.0, "top_p": 1.0}


def _number(body: dict[str, Any], name: str) -> Any:
    value = body.get(name)
    if value is None:
        return None
    top = _RANGES[name]
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= top:
        raise BadRequest(f"'{name}' must be a number from 0 to {top:g}.", param=name)
    return value


def _params(body: dict[str, Any]) -> Parameters:
    """What the model is asked for, from the request's own parameters."""
    tokens = body.get("max_output_tokens")
    if tokens is not None and (
        isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1
    ):
        raise BadRequest(
            "'max_output_tokens' must be a positive integer.", param="max_output_tokens"
        )
    reasoning = body.get("reasoning")
    if reasoning is not None and not isinstance(reasoning, dict):
        raise BadRequest("'reasoning' must be an object.", param="reasoning")
    effort = reasoning.get("effort") if reasoning is not None else None
    choice = body.get("tool_choice")
    parallel, user = body.get("parallel_tool_calls"), body.get("user")
    return Parameters(
        temperature=_number(body, "temperature"),
        top_p=_number(body, "top_p"),
        max_tokens=tokens,  # the name every chat-completions server knows
        tool_choice=_tool_choice(choice) if choice is not None else None,
        parallel_tool_calls=parallel if isinstance(parallel, bool) else None,
        response_format=_response_format(body.get("text")),
        reasoning_effort=effort if isinstance(effort, str) else None,
        user=user if isinstance(user, str) else None,
    )


def parse_responses_request(raw: bytes, headers: Mapping[str, str]) -> ResponsesRequest:
    body, model = model_request(raw)
    if "input" not in body and body.get("previous_response_id") is None:
        raise BadRequest("'input' is required.", param="input")
    _refuse(body)
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise BadRequest("'stream' must be a boolean.", param="stream")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise BadRequest("'instructions' must be a string.", param="instructions")
    previous = body.get("previous_response_id")
    if previous is not None and not isinstance(previous, str):
        raise BadRequest("'previous_response_id' must be a string.", param="previous_response_id")
    conversation = body.get("conversation")
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    if conversation is not None and not isinstance(conversation, str):
        raise BadRequest(
            "'conversation' must be a conversation id or an object with an 'id'.",
            param="conversation",
        )
    if conversation is not None and previous is not None:
        raise BadRequest(
            "'conversation' and 'previous_response_id' cannot both be given.",
            param="conversation",
        )
    store = body.get("store", True)
    if store is not None and not isinstance(store, bool):
        raise BadRequest("'store' must be a boolean.", param="store")
    metadata = body.get("metadata")
    if metadata is not None and (
        not isinstance(metadata, dict)
        or len(metadata) > 16
        or not all(isinstance(v, str) and len(k) <= 64 for k, v in metadata.items())
    ):
        raise BadRequest(
            "'metadata' must be an object of at most 16 string values.", param="metadata"
        )
    items = input_items(body.get("input", []))
    tools, client_names, hosted = _tools(body.get("tools"), items)
    names = frozenset(tool.name for tool in tools)
    narrowing = parse_narrowing(body.pop("toolgate", None), headers)
    max_tool_calls = body.get("max_tool_calls")
    if max_tool_calls is not None:
        if (
            isinstance(max_tool_calls, bool)
            or not isinstance(max_tool_calls, int)
            or max_tool_calls < 0
        ):
            raise BadRequest(
                "'max_tool_calls' must be a non-negative integer.", param="max_tool_calls"
            )
        current = narrowing.max_tool_calls
        narrowed = max_tool_calls if current is None else min(current, max_tool_calls)
        narrowing = replace(narrowing, max_tool_calls=narrowed)
    return ResponsesRequest(
        body=MappingProxyType(body),
        model=model,
        stream=bool(stream),
        items=items,
        instructions=instructions,
        params=_params(body),
        client_tools=tuple(tools),
        client_tool_names=names,
        narrowing=narrowing,
        store=store is not False,
        previous_response_id=previous,
        conversation=conversation,
        hosted=tuple(hosted),
        client_names=client_names,
    )
