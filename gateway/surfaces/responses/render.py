"""Rendering the loop's outcome as the Responses API's objects (docs/design.md §11): the
response itself, and its event stream — one lifecycle per request however many
rounds ran, ``sequence_number`` rising by one per event, ``output_index`` counting
only the items the client sees."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.errors import GatewayError
from gateway.surfaces.responses.items import (
    ClientNames,
    call_item,
    message_item,
    new_id,
    usage_of,
)
from gateway.surfaces.responses.request import ResponsesRequest
from gateway.upstream.sse import encode
from gateway.values import AssistantMessage, ChoiceDelta, ToolCall


class ResponseShape:
    """The fields of one response that do not depend on how it ends."""

    __slots__ = ("_fixed", "client_names", "created_at", "id")

    def __init__(self, request: ResponsesRequest, response_id: str | None = None) -> None:
        self.id = response_id or new_id("resp")
        self.client_names = request.client_names  # how its custom and namespaced calls go back
        self.created_at = int(time.time())
        body = request.body
        self._fixed: dict[str, Any] = {
            "instructions": request.instructions,
            "model": request.model,
            "tools": [
                _echoed(tool)
                for tool in body.get("tools") or []
                if isinstance(tool, dict) and tool.get("type") in _ECHOED and _client_side(tool)
            ],
            "tool_choice": body.get("tool_choice") or "auto",
            "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
            "metadata": body.get("metadata") or {},
            "temperature": body.get("temperature"),
            "top_p": body.get("top_p"),
            "max_output_tokens": body.get("max_output_tokens"),
            "max_tool_calls": body.get("max_tool_calls"),
            "previous_response_id": request.previous_response_id,
            "reasoning": body.get("reasoning"),
            "store": request.store,
            "text": body.get("text") or {"format": {"type": "text"}},
            "truncation": body.get("truncation") or "disabled",
        }
        if isinstance(body.get("user"), str):
            self._fixed["user"] = body["user"]
        if request.conversation is not None:
            self._fixed["conversation"] = {"id": request.conversation}

    def response(
        self,
        status: str,
        output: list[dict[str, Any]],
        usage: Mapping[str, Any] | None = None,
        error: GatewayError | None = None,
        incomplete: str | None = None,
    ) -> dict[str, Any]:
        response: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": None if error is None else {"code": _code(error), "message": error.message},
            "incomplete_details": None if incomplete is None else {"reason": incomplete},
            **self._fixed,
            "output": output,
        }
        if status in ("completed", "incomplete"):
            response["completed_at"] = int(time.time())
        if usage is not None:
            response["usage"] = usage_of(usage)
        return response


_ECHOED = frozenset({"function", "custom", "namespace", "tool_search"})  # the client's own tools


def _client_side(tool: dict[str, Any]) -> bool:
    """Not a hosted tool search (the client's own is offered as a function)."""
    return tool["type"] != "tool_search" or tool.get("execution") == "client"


def _echoed(tool: dict[str, Any]) -> dict[str, Any]:
    """A client tool as a response lists it (every field the schema asks for)."""
    kind = tool["type"]
    if kind == "tool_search":
        keys = ("type", "execution", "description", "parameters")
        return {key: tool[key] for key in keys if tool.get(key) is not None}
    if kind == "namespace":
        return {
            "type": "namespace",
            "name": tool["name"],
            "description": tool.get("description") or "",
            "tools": [_echoed(member) for member in tool["tools"]],
        }
    echoed: dict[str, Any] = {"type": kind, "name": tool["name"]}
    if kind == "function":
        echoed["parameters"] = tool.get("parameters")
        echoed["strict"] = tool.get("strict") if isinstance(tool.get("strict"), bool) else None
    elif isinstance(tool.get("format"), dict):
        echoed["format"] = tool["format"]
    if isinstance(tool.get("description"), str):
        echoed["description"] = tool["description"]
    return echoed


def _code(error: GatewayError) -> str:
    """A ``ResponseErrorCode``: the schema knows few; the gateway's are server errors."""
    if error.status == 429:
        return "rate_limit_exceeded"
    return "server_error"


def incomplete_reason(finish_reason: str | None) -> str | None:
    if finish_reason == "length":
        return "max_output_tokens"
    if finish_reason == "content_filter":
        return "content_filter"
    return None


def output_of(
    turn: AssistantMessage, calls: Sequence[ToolCall], names: ClientNames | None = None
) -> list[dict[str, Any]]:
    """A non-streamed answer's output: its text, then the client calls handed back."""
    output = []
    if turn.content or turn.refusal or not calls:
        output.append(message_item(turn, new_id("msg")))
    output += [call_item(call, _call_id(call, names), names=names) for call in calls]
    return output


def _call_id(call: ToolCall, names: ClientNames | None) -> str:
    """A new id for a call's item: ``ctc_`` for a custom tool's, ``tsc_`` for a client
    tool search's, ``fc_`` for a function's."""
    named = names.get(call.name) if names and call.name else None
    if named is None:
        return new_id("fc")
    return new_id("ctc" if named.custom else "tsc" if named.search else "fc")


_WHOLE = frozenset({"mcp_approval_request", "tool_search_call"})  # items streamed whole


class ResponseEvents:
    """Writes one response's event stream (``surfaces.streaming``'s writer protocol)."""

    __slots__ = (
        "_finish",
        "_message",
        "_output",
        "_part",
        "_sequence",
        "_shape",
        "_started",
        "_text",
    )

    def __init__(self, shape: ResponseShape) -> None:
        self._shape = shape
        self._sequence = 0
        self._started = False
        self._output: list[dict[str, Any]] = []  # the items done, in order
        self._message: dict[str, Any] | None = None  # the message item being written
        self._part: str | None = None  # the kind of content part open in it
        self._text: dict[str, list[str]] = {"content": [], "refusal": []}
        self._finish: str | None = None

    def _event(self, kind: str, **fields: Any) -> bytes:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return encode(event)

    def open(self) -> list[bytes]:
        if self._started:
            return []
        self._started = True
        response = self._shape.response("in_progress", [])
        return [
            self._event("response.created", response=response),
            self._event("response.in_progress", response=response),
        ]

    def _open_message(self) -> list[bytes]:
        if self._message is not None:
            return []
        self._message = {
            "id": new_id("msg"),
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        return [
            self._event(
                "response.output_item.added", output_index=len(self._output), item=self._message
            )
        ]

    def _part_event(self, kind: str, done: bool) -> bytes:
        assert self._message is not None
        text = "".join(self._text[kind])
        if kind == "content":
            part = {
                "type": "output_text",
                "text": text if done else "",
                "annotations": [],
                "logprobs": [],
            }
        else:
            part = {"type": "refusal", "refusal": text if done else ""}
        return self._event(
            "response.content_part.done" if done else "response.content_part.added",
            item_id=self._message["id"],
            output_index=len(self._output),
            content_index=len(self._message["content"]),
            part=part,
        )

    def _close_part(self) -> list[bytes]:
        if self._message is None or self._part is None:
            return []
        kind, item_id = self._part, self._message["id"]
        text = "".join(self._text[kind])
        where = {
            "item_id": item_id,
            "output_index": len(self._output),
            "content_index": len(self._message["content"]),
        }
        if kind == "content":
            done = self._event("response.output_text.done", text=text, logprobs=[], **where)
        else:
            done = self._event("response.refusal.done", refusal=text, **where)
        events = [done, self._part_event(kind, done=True)]
        if kind == "content":
            self._message["content"].append(
                {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            )
        else:
            self._message["content"].append({"type": "refusal", "refusal": text})
        self._text[kind] = []
        self._part = None
        return events

    def choice_delta(self, delta: ChoiceDelta) -> list[bytes]:
        events = self._open_message()
        assert self._message is not None
        for kind in ("refusal", "content"):
            text = delta.delta.get(kind)
            if not text:
                continue
            if self._part != kind:
                events += self._close_part()
                self._part = kind
                events.append(self._part_event(kind, done=False))
            self._text[kind].append(text)
            where = {
                "item_id": self._message["id"],
                "output_index": len(self._output),
                "content_index": len(self._message["content"]),
            }
            if kind == "content":
                events.append(
                    self._event("response.output_text.delta", delta=text, logprobs=[], **where)
                )
            else:
                events.append(self._event("response.refusal.delta", delta=text, **where))
        return events

    def _close_message(self, always: bool) -> list[bytes]:
        """End the message item; ``always``: write an empty one if none was started."""
        if self._message is None and not always:
            return []
        events = self._open_message()
        assert self._message is not None
        if not self._message["content"] and self._part is None:
            self._part = "content"
            events.append(self._part_event("content", done=False))
        events += self._close_part()
        self._message["status"] = "completed"
        events.append(
            self._event(
                "response.output_item.done", output_index=len(self._output), item=self._message
            )
        )
        self._output.append(self._message)
        self._message = None
        return events

    def hand_back(self, calls: Sequence[ToolCall]) -> list[bytes]:
        events = self._close_message(always=False)
        names = self._shape.client_names
        for call in calls:
            index = len(self._output)
            done = call_item(call, _call_id(call, names), "completed", names)
            if done["type"] in _WHOLE:  # no deltas: it comes whole
                for kind in ("response.output_item.added", "response.output_item.done"):
                    events.append(self._event(kind, output_index=index, item=done))
                self._output.append(done)
                continue
            custom = done["type"] == "custom_tool_call"
            field = "input" if custom else "arguments"
            text = done[field]
            added = {**done, field: ""}
            if not custom:
                added["status"] = "in_progress"
            where = {"item_id": done["id"], "output_index": index}
            events.append(self._event("response.output_item.added", output_index=index, item=added))
            if custom:
                events.append(
                    self._event("response.custom_tool_call_input.delta", delta=text, **where)
                )
                events.append(
                    self._event("response.custom_tool_call_input.done", input=text, **where)
                )
            else:
                events.append(
                    self._event("response.function_call_arguments.delta", delta=text, **where)
                )
                events.append(
                    self._event(
                        "response.function_call_arguments.done",
                        name=done["name"],
                        arguments=text,
                        **where,
                    )
                )
            events.append(self._event("response.output_item.done", output_index=index, item=done))
            self._output.append(done)
        return events

    def final(self, finish_reason: str, stop_sequence: str | None = None) -> list[bytes]:
        self._finish = finish_reason
        return self._close_message(always=True)

    def last(self, usage: Mapping[str, Any]) -> dict[str, Any]:
        """The whole response the last event carries, its usage summed over every round."""
        incomplete = incomplete_reason(self._finish)
        status = "incomplete" if incomplete else "completed"
        return self._shape.response(status, self._output, usage, incomplete=incomplete)

    def close(self, response: dict[str, Any]) -> list[bytes]:
        """The last event: ``response`` (``last``'s, as it was kept)."""
        kind = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        return [self._event(kind, response=response)]

    def error(self, exc: GatewayError) -> bytes:
        """After the first event, a failure is an ``error`` event and ``response.failed``."""
        failed = self._shape.response("failed", self._output, error=exc)
        return self._event(
            "error", code=exc.code or exc.type, message=exc.message, param=exc.param
        ) + self._event("response.failed", response=failed)
