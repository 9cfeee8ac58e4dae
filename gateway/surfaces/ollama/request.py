"""Reading an Ollama chat request (``POST /api/chat``, docs/design.md §20, docs/ollama.md)
into the gateway's values: messages whose images become image parts, an assistant's
calls (arguments as objects) named by the ids their echo derives (``call_ids``), a tool
message matched to the call it answers by its ``tool_name``; the tools (chat's shape);
``format``, ``options`` and ``think`` as parameters. Strict about what the gateway
relies on, lenient about the rest (``keep_alive`` is accepted and not forwarded)."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from gateway.chat_json import decode_tool
from gateway.errors import BadRequest
from gateway.policy.limits import Narrowing
from gateway.surfaces.media import IMAGES, media_problem, sniffed
from gateway.surfaces.request_fields import model_request, parse_narrowing, user_text
from gateway.upstream.call_ids import stable_id
from gateway.values import (
    APPROVAL_TOOL,
    NO_EXTRA,
    Message,
    Parameters,
    Part,
    ResponseFormat,
    ToolCall,
    ToolDefinition,
)
from tool_registry import dumps_text, immutable

_ROLES = frozenset({"system", "user", "assistant", "tool"})


@immutable
class OllamaRequest:
    body: Mapping[str, Any]  # as the client sent it, less the ``toolgate`` field
    messages: tuple[Message, ...]
    parameters: Parameters
    model: str
    stream: bool
    client_tools: tuple[ToolDefinition, ...]
    client_tool_names: frozenset[str]
    narrowing: Narrowing
    client_approves: bool = False
    generate: bool = False  # ``/api/generate``: a prompt in, its text out, no tools

    def user_text(self) -> str:
        return user_text(self.messages)


def _bad(message: str, param: str) -> BadRequest:
    return BadRequest(message, param=param)


def _image(data: Any, param: str) -> Part:
    """A base64 image as a part: its media type read from its first bytes."""
    if not isinstance(data, str):
        raise _bad(f"'{param}' must be a base64 string.", param)
    problem = media_problem(data, None, IMAGES)
    media = sniffed(data)
    if problem is not None or media is None:
        raise _bad(f"'{param}' {problem}.", param)
    url = f"data:{media};base64,{data}"
    return Part("image_url", None, MappingProxyType({"image_url": {"url": url}}))


def _calls(raw: Any, param: str) -> tuple[ToolCall, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise _bad(f"'{param}' must be an array.", param)
    calls = []
    seen: dict[str, int] = {}
    for index, call in enumerate(raw):
        where = f"{param}[{index}].function"
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        given = function.get("arguments", {}) if isinstance(function, dict) else None
        if not isinstance(name, str) or not isinstance(given, dict):
            raise _bad(f"'{where}' must have a string 'name' and object 'arguments'.", where)
        ordinal = seen[name] = seen.get(name, -1) + 1  # its place among calls of its name
        call_id = stable_id(name, given, ordinal)
        if name == APPROVAL_TOOL and isinstance(given.get("approval_id"), str):
            call_id = given["approval_id"]  # an approval is named by its own id
        calls.append(ToolCall(call_id, name, dumps_text(given)))
    return tuple(calls)


def decode_messages(raw: Any) -> tuple[Message, ...]:
    if not isinstance(raw, list) or not raw:
        raise _bad("'messages' must be a non-empty array.", "messages")
    messages: list[Message] = []
    unanswered = _Unanswered()  # the last assistant turn's calls not yet answered
    for index, message in enumerate(raw):
        param = f"messages[{index}]"
        if not isinstance(message, dict) or message.get("role") not in _ROLES:
            raise _bad(f"'{param}.role' must be system, user, assistant or tool.", param)
        role, content = message["role"], message.get("content", "")
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise _bad(f"'{param}.content' must be a string.", f"{param}.content")
        images = message.get("images") or []
        if not isinstance(images, list):
            raise _bad(f"'{param}.images' must be an array.", f"{param}.images")
        parts = [_image(image, f"{param}.images[{i}]") for i, image in enumerate(images)]
        said: str | tuple[Part, ...] = (Part("text", content), *parts) if parts else content
        if role == "assistant":
            calls = _calls(message.get("tool_calls"), f"{param}.tool_calls")
            unanswered = _Unanswered(calls)
            extra = MappingProxyType({"content": None}) if calls and not content else NO_EXTRA
            messages.append(Message("assistant", said or None, calls, extra=extra))
        elif role == "tool":
            messages.append(Message("tool", content, call_id=unanswered.take(message)))
        else:
            messages.append(Message(role, said))
    return tuple(messages)


class _Unanswered:
    """The last assistant turn's calls not yet answered: by name, and in order (for a
    tool message that names none). Each answer takes one in constant time, so a turn of
    many calls and as many answers costs no more than reading them."""

    def __init__(self, calls: tuple[ToolCall, ...] = ()) -> None:
        self._order = deque(calls)
        self._named: dict[str | None, deque[ToolCall]] = {}
        for call in calls:
            self._named.setdefault(call.name, deque()).append(call)
        self._taken: set[str] = set()

    def take(self, message: dict[str, Any]) -> str:
        """The call a tool message answers: the first unanswered call of its
        ``tool_name`` (of any name when it names none), else an id that matches none."""
        name = message.get("tool_name") or message.get("name")
        queue = self._named.get(name) if isinstance(name, str) else self._order
        while queue:
            call = queue.popleft()
            if call.id not in self._taken:
                self._taken.add(call.id)
                return call.id
        return stable_id(name if isinstance(name, str) else "", {}, -1)


def _tools(raw: Any) -> tuple[list[ToolDefinition], bool]:
    if raw is None:
        return [], False
    if not isinstance(raw, list):
        raise _bad("'tools' must be an array.", "tools")
    tools, approves = [], False
    for index, tool in enumerate(raw):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            param = f"tools[{index}].function.name"
            raise _bad(f"'{param}' is required and must be a string.", param)
        if function["name"] == APPROVAL_TOOL:
            approves = True
            continue
        tools.append(decode_tool({"type": "function", "function": function}))
    return tools, approves


def _number(value: Any) -> float | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


_THINK_LEVELS = ("low", "medium", "high")


def _parameters(body: Mapping[str, Any]) -> Parameters:
    options = body.get("options") or {}
    if not isinstance(options, dict):
        raise _bad("'options' must be an object.", "options")
    extra: dict[str, object] = {}
    stop = options.get("stop")
    if isinstance(stop, str | list):
        extra["stop"] = stop
    if type(options.get("seed")) is int:
        extra["seed"] = options["seed"]
    predict = options.get("num_predict")
    form = body.get("format")
    response_format = None
    if form == "json":
        response_format = ResponseFormat("json_object")
    elif isinstance(form, dict):
        response_format = ResponseFormat("json_schema", "output", None, form)
    elif form not in (None, ""):  # Ollama's own: "json", a JSON schema, or nothing
        raise _bad("'format' must be \"json\" or a JSON schema object.", "format")
    think = body.get("think")
    if think is not None and not isinstance(think, bool) and think not in _THINK_LEVELS:
        raise _bad('\'think\' must be a boolean or one of "low", "medium", "high".', "think")
    return Parameters(
        temperature=_number(options.get("temperature")),
        top_p=_number(options.get("top_p")),
        max_tokens=predict if type(predict) is int and predict > 0 else None,
        response_format=response_format,
        reasoning_effort=think if think in _THINK_LEVELS else None,
        extra=MappingProxyType(extra) if extra else NO_EXTRA,
        wire="ollama",
    )


def parse_ollama_generate(raw: bytes, headers: Mapping[str, str]) -> OllamaRequest:
    """``/api/generate``: its ``system`` and ``prompt`` (with its images) as a chat of two
    messages, offered no tools at all (the gateway's narrowed away)."""
    body, model = model_request(raw)
    stream = body.get("stream", True)
    if not isinstance(stream, bool):
        raise _bad("'stream' must be a boolean.", "stream")
    prompt, system = body.get("prompt", ""), body.get("system")
    if not isinstance(prompt, str) or not (system is None or isinstance(system, str)):
        raise _bad("'prompt' and 'system' must be strings.", "prompt")
    user: dict[str, Any] = {"role": "user", "content": prompt, "images": body.get("images")}
    messages = [*([{"role": "system", "content": system}] if system else []), user]
    narrowing = replace(parse_narrowing(body.pop("toolgate", None), headers), tools=frozenset())
    return OllamaRequest(
        MappingProxyType(body),
        decode_messages(messages),
        _parameters(body),
        model,
        stream,
        (),
        frozenset(),
        narrowing,
        generate=True,
    )


def parse_ollama_chat(raw: bytes, headers: Mapping[str, str]) -> OllamaRequest:
    body, model = model_request(raw)
    stream = body.get("stream", True)  # Ollama streams unless told not to
    if not isinstance(stream, bool):
        raise _bad("'stream' must be a boolean.", "stream")
    narrowing = parse_narrowing(body.pop("toolgate", None), headers)
    tools, approves = _tools(body.get("tools"))
    return OllamaRequest(
        MappingProxyType(body),
        decode_messages(body.get("messages")),
        _parameters(body),
        model,
        stream,
        tuple(tools),
        frozenset(tool.name for tool in tools),
        narrowing,
        approves,
    )
