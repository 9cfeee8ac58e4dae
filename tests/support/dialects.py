"""One script, every dialect: a chat-shaped script (a function of the messages it reads,
answering with ``says`` or ``asks``) drives the scripted model server of any dialect —
chat completions (``scripted.Model``), Anthropic Messages (``anthropic_upstream``),
Bedrock Converse (``bedrock_upstream``) — each of which still validates every request
against its own SDK's or service model's types. The script reads a chat view of what
the server was sent: messages with a role, text content, tool calls and the call a tool
message answers, and the names of the tools offered."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.support import anthropic_upstream, bedrock_upstream
from tests.support.recorder import Recorder
from tests.support.scripted import Model

ChatScript = Callable[[dict[str, Any]], dict[str, Any]]
DIALECTS = ("openai", "anthropic", "bedrock")
AWS_KEYS = {"AKIDMATRIX": ("matrix-secret", None)}


def _text(blocks: Any, key: str = "text") -> str:
    if isinstance(blocks, str):
        return blocks
    return "".join(b.get(key, "") for b in blocks if isinstance(b, dict) and key in b)


def anthropic_view(body: dict[str, Any]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for turn in body["messages"]:
        content = turn["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if turn["role"] == "assistant":
            calls = [
                {
                    "id": b["id"],
                    "function": {"name": b["name"], "arguments": json.dumps(b["input"])},
                }
                for b in blocks
                if b["type"] == "tool_use"
            ]
            said = "".join(b["text"] for b in blocks if b["type"] == "text")
            messages.append({"role": "assistant", "content": said or None, "tool_calls": calls})
            continue
        for block in blocks:
            if block["type"] == "tool_result":
                given = block.get("content", "")
                messages.append(
                    {"role": "tool", "tool_call_id": block["tool_use_id"], "content": _text(given)}
                )
            elif block["type"] == "text":
                messages.append({"role": "user", "content": block["text"]})
    tools = [{"function": {"name": t["name"]}} for t in body.get("tools", [])]
    return {"messages": messages, "tools": tools, "sent": body}


def bedrock_view(body: dict[str, Any]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for turn in body["messages"]:
        blocks = turn["content"]
        if turn["role"] == "assistant":
            calls = [
                {
                    "id": b["toolUse"]["toolUseId"],
                    "function": {
                        "name": b["toolUse"]["name"],
                        "arguments": json.dumps(b["toolUse"]["input"]),
                    },
                }
                for b in blocks
                if "toolUse" in b
            ]
            said = "".join(b["text"] for b in blocks if "text" in b)
            messages.append({"role": "assistant", "content": said or None, "tool_calls": calls})
            continue
        for block in blocks:
            if "toolResult" in block:
                result = block["toolResult"]
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": result["toolUseId"],
                        "content": _text(result["content"]),
                    }
                )
            elif "text" in block:
                messages.append({"role": "user", "content": block["text"]})
    config = body.get("toolConfig", {})
    tools = [{"function": {"name": t["toolSpec"]["name"]}} for t in config.get("tools", [])]
    return {"messages": messages, "tools": tools, "sent": body}


def _anthropic_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = [anthropic_upstream.text(message["content"])] if message.get("content") else []
    for call in message.get("tool_calls") or []:
        given = json.loads(call["function"]["arguments"])
        blocks.append(anthropic_upstream.tool_use(call["function"]["name"], given, call["id"]))
    return blocks


def _bedrock_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = [bedrock_upstream.text(message["content"])] if message.get("content") else []
    for call in message.get("tool_calls") or []:
        given = json.loads(call["function"]["arguments"])
        blocks.append(bedrock_upstream.tool_use(call["function"]["name"], given, call["id"]))
    return blocks


class ScriptedServer:
    """The scripted model server of ``dialect``, driven by one chat script: its recorder
    (to serve), the requests it got as chat views, and what its types refused."""

    def __init__(self, dialect: str, script: ChatScript) -> None:
        self.dialect = dialect
        if dialect == "anthropic":
            self._server: Any = anthropic_upstream.Messages(
                lambda body: _anthropic_blocks(script(anthropic_view(body)))
            )
        elif dialect == "bedrock":
            self._server = bedrock_upstream.Runtime(
                lambda body: _bedrock_blocks(script(bedrock_view(body))), keys=AWS_KEYS
            )
        else:
            self._server = Model(script)

    @property
    def recorder(self) -> Recorder:
        recorder: Recorder = self._server.recorder
        return recorder

    @property
    def refused(self) -> list[str]:
        return list(getattr(self._server, "refused", []))

    @property
    def views(self) -> list[dict[str, Any]]:
        """What each request sent, as the script read it."""
        bodies = self._server.requests
        view = {"anthropic": anthropic_view, "bedrock": bedrock_view}.get(self.dialect)
        return [view(b) if view is not None else b for b in bodies]

    def upstream(self, url: str) -> dict[str, Any]:
        """The gateway's ``upstreams[]`` entry for it at ``url``."""
        entry: dict[str, Any] = {"name": "up", "base_url": url, "max_retries": 0}
        if self.dialect == "openai":
            entry["base_url"] = f"{url}/v1"
        else:
            entry["dialect"] = self.dialect
        if self.dialect == "bedrock":
            entry["region"] = bedrock_upstream.REGION
        return entry
