"""What the model reads back from a tool call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import jmespath
import jmespath.exceptions

from .jsonio import dumps_text, loads
from .spec import ResultSpec

# ``tool_error``: the tool answered that it failed (an MCP ``isError`` result or error).
Outcome = Literal["ok", "http_error", "tool_error", "timeout", "invalid_args", "denied", "unknown"]

_ERROR_BODY_CHARS = 500


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The text handed to the model, and how the call went."""

    content: str
    outcome: Outcome
    status: int | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


def compact_json(value: Any) -> str:
    return dumps_text(value)


def cut(text: str, max_chars: int) -> str:
    """Cut ``text`` to ``max_chars`` with a visible marker saying how much was left out."""
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}…[truncated {len(text) - max_chars} characters]"


def error_result(
    message: str, outcome: Outcome, status: int | None = None, body: str | None = None
) -> ToolResult:
    payload: dict[str, Any] = {"error": message, "status": status}
    if body:
        payload["body"] = cut(body, _ERROR_BODY_CHARS)
    return ToolResult(compact_json(payload), outcome, status)


def decode_body(body: bytes, charset: str | None) -> str:
    """A body as text; an unknown or broken charset falls back to UTF-8."""
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except (LookupError, ValueError):
        return body.decode("utf-8", errors="replace")


def success_result(
    spec: ResultSpec, status: int, body: bytes, charset: str | None, truncated: bool
) -> ToolResult:
    """The model's view of a 2xx response: JSON compacted (after ``pick``), else text."""
    if not body:
        return ToolResult(f"OK (HTTP {status}, no content)", "ok", status)
    text = decode_body(body, charset)
    if not truncated:
        try:
            value = loads(text)
        except ValueError:
            pass
        else:
            if spec.pick is not None:
                try:
                    value = jmespath.search(spec.pick, value)
                except jmespath.exceptions.JMESPathError:
                    return error_result("the tool's answer does not fit its 'pick'", "http_error")
            text = compact_json(value)
    else:
        text += "…[response cut at the size limit]"
    return ToolResult(cut(text, spec.max_chars), "ok", status)
