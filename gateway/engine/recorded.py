"""A recording of a request's trajectory as a value, and its document (issue 26).

``Recording`` holds what a replay needs: where the loop began (the client's parameters,
its visible history and its own tools), the server tools as the model saw them, each
round's answer, each tool call and its result, how the run ended. ``encode`` writes
the document a trace keeps and ``GET /v1/toolgate/traces/{id}`` shows (version 1: the
loop's request, its history and tool definitions in the chat dialect, as since issue
26); ``decode`` reads one back — from the store, a file or an API body, all hostile
input — or says what keeps it from being replayed (``RecordingUnreadable``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, get_args

from gateway.chat_json import (
    decode_messages,
    decode_parameters,
    decode_tools,
    encode_messages,
    encode_parameters,
    encode_tools,
)
from gateway.store.message_records import call_record
from gateway.values import (
    AnsweredRound,
    AssistantMessage,
    CallKind,
    Completion,
    Message,
    Parameters,
    ToolCall,
    ToolDefinition,
)
from tool_registry import dumps_text, immutable

VERSION = 1

Json = Mapping[str, Any]  # a JSON object the recording keeps as it was (usage, a body)


class RecordingUnreadable(ValueError):
    """What keeps a document from being replayed (its message says, for the client)."""


@immutable
class LoopStart:
    """Where a loop began: the client's parameters (the dialect's, less its history),
    its visible history and its own tools."""

    params: Parameters
    history: tuple[Message, ...]
    client_tools: tuple[ToolDefinition, ...] = ()


@immutable
class RecordedTool:
    """A server tool as the model saw it, with its fingerprint, source and effects."""

    definition: ToolDefinition
    fingerprint: str | None = None
    source: str = "replay"
    effects: str | None = None


@immutable
class RecordedCall:
    """A tool call as run: its id, tool, arguments (redacted), outcome and result."""

    id: str | None
    name: str | None
    arguments: Any = None  # JSON: an object, or the text the model wrote
    outcome: str | None = None
    result: str | None = None
    reused_from: str | None = None


@immutable
class Ending:
    """How the recorded run ended: a final answer, or calls handed back."""

    kind: Literal["final", "hand_back"]
    content: str | None = None
    refusal: str | None = None
    finish_reason: str | None = None
    calls: tuple[ToolCall, ...] = ()


@immutable
class Recording:
    loop: LoopStart | None
    tools: tuple[RecordedTool, ...] = ()
    rounds: tuple[AnsweredRound, ...] = ()
    tool_calls: tuple[RecordedCall, ...] = ()
    ended: Ending | None = None
    route: str | None = None
    model: str | None = None  # the model the client asked for
    upstream_model: str | None = None  # the model that answered, as the upstream said
    request: Json | None = None  # the body as the client sent it
    status: int | None = None
    error: str | None = None
    usage: Json | None = None
    # The guardrails' verdicts on the run (docs/guardrails.md): read, never replayed.
    guardrails: tuple[Json, ...] = ()

    def calls(self) -> list[ToolCall]:
        """Every call the model made, round by round."""
        return [call for answered in self.rounds for call in answered.answer.turn.calls]


# -- writing ----------------------------------------------------------------------------


def _round(answered: AnsweredRound) -> dict[str, Any]:
    answer = answered.answer
    turn = answer.turn
    kept: dict[str, Any] = {
        "round": answered.round,
        "content": turn.content,
        "refusal": turn.refusal,
        "calls": [call_record(call) for call in turn.calls],
        "finish_reason": answer.finish_reason,
        "usage": answer.usage,
    }
    if answered.choice:
        kept["choice"] = answered.choice
    return kept


def _tool_call(call: RecordedCall) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": call.id,
        "name": call.name,
        "arguments": call.arguments,
        "outcome": call.outcome,
        "result": call.result,
    }
    if call.reused_from is not None:
        entry["reused_from"] = call.reused_from
    return entry


def _ending(ended: Ending | None) -> dict[str, Any] | None:
    if ended is None:
        return None
    if ended.kind == "hand_back":
        return {"kind": "hand_back", "calls": [call_record(call) for call in ended.calls]}
    return {
        "kind": "final",
        "content": ended.content,
        "refusal": ended.refusal,
        "finish_reason": ended.finish_reason,
    }


def loop_document(loop: LoopStart) -> dict[str, Any]:
    """Where the loop began, as the chat-dialect request a replay sends."""
    params = {**encode_parameters(loop.params), "messages": encode_messages(loop.history)}
    return {"params": params, "client_tools": encode_tools(loop.client_tools)}


def encode(recording: Recording) -> dict[str, Any]:
    return {
        "version": VERSION,
        "route": recording.route,
        "model": recording.model,
        "upstream_model": recording.upstream_model,
        "request": recording.request,
        "loop": loop_document(recording.loop) if recording.loop is not None else None,
        "tools": [
            {
                "name": tool.definition.name,
                "definition": encode_tools((tool.definition,))[0],
                "fingerprint": tool.fingerprint,
                "source": tool.source,
                "effects": tool.effects,
            }
            for tool in recording.tools
        ],
        "rounds": [_round(answered) for answered in recording.rounds],
        "tool_calls": [_tool_call(call) for call in recording.tool_calls],
        "ended": _ending(recording.ended),
        "status": recording.status,
        "error": recording.error,
        "usage": recording.usage,
        **({"guardrails": list(recording.guardrails)} if recording.guardrails else {}),
    }


# -- reading ----------------------------------------------------------------------------


def _objects(document: Json, part: str) -> list[dict[str, Any]]:
    items = document.get(part, [])
    if items is None:
        return []
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise RecordingUnreadable(f"its {part} are not a list of objects")
    return items


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _json(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def _read_call(call: dict[str, Any]) -> ToolCall:
    """A call as recorded (a hand-made recording's arguments may be an object)."""
    arguments = call.get("arguments", "")
    if not isinstance(arguments, str):
        arguments = dumps_text(arguments)
    kind: CallKind = next((k for k in get_args(CallKind) if k == call.get("kind")), "function")
    return ToolCall(_text(call.get("id")) or "", _text(call.get("name")), arguments, kind)


def _read_round(answer: dict[str, Any], index: int) -> AnsweredRound:
    calls = answer.get("calls", [])
    if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
        raise RecordingUnreadable("a round's calls are not a list of objects")
    turn = AssistantMessage(
        _text(answer.get("content")),
        tuple(_read_call(call) for call in calls),
        _text(answer.get("refusal")),
    )
    iteration, choice = answer.get("round"), answer.get("choice")
    completion = Completion(turn, _json(answer.get("usage")), _text(answer.get("finish_reason")))
    return AnsweredRound(
        iteration if type(iteration) is int else index,
        completion,
        choice if type(choice) is int else 0,
    )


def _read_loop(document: Json) -> LoopStart:
    loop = document.get("loop")
    if not isinstance(loop, dict) or not isinstance(loop.get("params"), dict):
        raise RecordingUnreadable("it holds no loop to replay")
    params = loop["params"]
    messages = params.get("messages")
    if not isinstance(messages, list):
        raise RecordingUnreadable("its loop has no messages")
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        raise RecordingUnreadable("a message of its loop has no role")
    client_tools = loop.get("client_tools") or []
    if not isinstance(client_tools, list) or not all(isinstance(t, dict) for t in client_tools):
        raise RecordingUnreadable("its client tools are not a list of objects")
    return LoopStart(
        decode_parameters(params),
        decode_messages(messages),
        decode_tools(client_tools),
    )


def _read_tool(tool: dict[str, Any]) -> RecordedTool:
    definition = tool.get("definition")
    function = definition.get("function") if isinstance(definition, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise RecordingUnreadable("a tool has no definition with a name")
    parameters = function.get("parameters", {})
    if not isinstance(parameters, dict):
        raise RecordingUnreadable(
            f"the parameters of tool {function['name'][:64]!r} are not an object"
        )
    description = function.get("description")
    source = tool.get("source", "replay")
    return RecordedTool(
        ToolDefinition(
            function["name"],
            description if isinstance(description, str) else None,
            parameters or {"type": "object"},
        ),
        _text(tool.get("fingerprint")),
        str(source),
        _text(tool.get("effects")),
    )


def _read_tool_call(entry: dict[str, Any]) -> RecordedCall:
    result = entry.get("result")
    return RecordedCall(
        _text(entry.get("id")),
        _text(entry.get("name")),
        entry.get("arguments"),
        _text(entry.get("outcome")),
        None if result is None else str(result),
        _text(entry.get("reused_from")),
    )


def _read_ending(value: Any) -> Ending | None:
    if not isinstance(value, dict):
        return None
    if value.get("kind") == "hand_back":
        calls = value.get("calls")
        listed = calls if isinstance(calls, list) else []
        read = tuple(_read_call(c) for c in listed if isinstance(c, dict))
        return Ending("hand_back", calls=read)
    return Ending(
        "final",
        _text(value.get("content")),
        _text(value.get("refusal")),
        _text(value.get("finish_reason")),
    )


def decode(document: Any) -> Recording:
    """A recording from its document; ``RecordingUnreadable`` says what keeps it from
    being replayed."""
    if not isinstance(document, dict):
        raise RecordingUnreadable("it is not an object")
    loop = _read_loop(document)
    tools = _objects(document, "tools")
    rounds = _objects(document, "rounds")
    tool_calls = _objects(document, "tool_calls")
    status = document.get("status")
    return Recording(
        loop=loop,
        tools=tuple(_read_tool(tool) for tool in tools),
        rounds=tuple(_read_round(answer, index) for index, answer in enumerate(rounds, 1)),
        tool_calls=tuple(_read_tool_call(entry) for entry in tool_calls),
        ended=_read_ending(document.get("ended")),
        route=_text(document.get("route")),
        model=_text(document.get("model")),
        upstream_model=_text(document.get("upstream_model")),
        request=_json(document.get("request")),
        status=status if type(status) is int else None,
        error=_text(document.get("error")),
        usage=_json(document.get("usage")),
        guardrails=tuple(_objects(document, "guardrails")),
    )
