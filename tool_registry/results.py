"""What the model reads back from a tool call."""

from __future__ import annotations

import contextlib
from typing import Any, Literal

import jmespath
import jmespath.exceptions

from .jsonio import dumps_text, loads_exact
from .redact import Redactor
from .spec import ResultSpec
from .value_type import immutable

# ``tool_error``: the tool answered that it failed (an MCP ``isError`` result or error).
# ``unreadable``: it answered 2xx, but not with what its result shaping can read.
Outcome = Literal[
    "ok", "http_error", "tool_error", "unreadable", "timeout", "invalid_args", "denied", "unknown"
]

_ERROR_BODY_CHARS = 500


@immutable
class ToolResult:
    """The text handed to the model, and how the call went."""

    content: str
    outcome: Outcome
    status: int | None = None  # the HTTP status the tool answered with
    code: str | None = None  # the tool's own error code (an MCP server's JSON-RPC error)
    # Where ``content`` was cut to ``max_chars``: the text before the cut (its configured
    # secrets redacted), which guardrails screen before it is cut again (screen first,
    # cut after: a secret cut in two is found whole).
    whole: str | None = None
    max_chars: int | None = None

    def recut(self, text: str) -> ToolResult:
        """This result with ``text`` (the whole, screened) in place of its content, cut
        as its content was."""
        assert self.max_chars is not None
        return ToolResult(cut(text, self.max_chars), self.outcome, self.status, self.code)

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


def compact_json(value: Any) -> str:
    return dumps_text(value)


_NO_SECRETS = Redactor(())


def cut(text: str, max_chars: int, redactor: Redactor = _NO_SECRETS) -> str:
    """Cut ``text`` to ``max_chars`` with a visible marker saying how much was left out;
    configured secrets are redacted first, a secret's beginning at the cut too."""
    return redactor.cut(text, max_chars)


def cut_result(
    text: str,
    max_chars: int,
    redactor: Redactor = _NO_SECRETS,
    status: int | None = None,
    outcome: Outcome = "ok",
) -> ToolResult:
    """A result of ``text`` cut to ``max_chars``, keeping the whole (redacted) where it
    was cut, for the guardrails to read before the cut (``ToolResult.whole``)."""
    content = cut(text, max_chars, redactor)
    if len(text) <= max_chars:
        return ToolResult(content, outcome, status)
    return ToolResult(content, outcome, status, whole=redactor.text(text), max_chars=max_chars)


def error_result(
    message: str,
    outcome: Outcome,
    status: int | None = None,
    body: str | None = None,
    redactor: Redactor = _NO_SECRETS,
) -> ToolResult:
    payload: dict[str, Any] = {"error": message, "status": status}
    if body:
        payload["body"] = cut(body, _ERROR_BODY_CHARS, redactor)
    return ToolResult(compact_json(payload), outcome, status)


def decode_body(body: bytes, charset: str | None) -> str:
    """A body as text; an unknown or broken charset falls back to UTF-8."""
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except (LookupError, ValueError):
        return body.decode("utf-8", errors="replace")


def success_result(
    spec: ResultSpec,
    status: int,
    body: bytes,
    charset: str | None,
    truncated: bool,
    redactor: Redactor = _NO_SECRETS,
) -> ToolResult:
    """The model's view of a 2xx response: JSON compacted (after ``pick``), else text.

    With ``pick`` the model sees only what it selects, so an answer that cannot be
    read whole as JSON — cut at ``max_response_bytes``, not JSON, ``NaN``, text after
    the document, nested past the parser's depth — is an ``unreadable`` error result
    saying why, never the raw text. Without ``pick`` such an answer goes to the model
    as text, cut at ``max_chars`` (and marked when it was cut at the byte limit).
    """
    if not body:
        return ToolResult(f"OK (HTTP {status}, no content)", "ok", status)
    if spec.pick is not None:
        return _picked(
            pick=spec.pick,
            max_chars=spec.max_chars,
            status=status,
            body=body,
            charset=charset,
            truncated=truncated,
            redactor=redactor,
        )
    text = decode_body(body, charset)
    if truncated:
        text = redactor.tail(redactor.text(text)) + "…[response cut at the size limit]"
    else:
        with contextlib.suppress(ValueError, RecursionError):  # not JSON: the text as it is
            text = compact_json(loads_exact(text))
    return cut_result(text, spec.max_chars, redactor, status)


def _picked(
    pick: str,
    max_chars: int,
    status: int,
    body: bytes,
    charset: str | None,
    truncated: bool,
    redactor: Redactor,
) -> ToolResult:
    if truncated:
        return _unreadable("it is larger than the tool's max_response_bytes", status)
    try:
        value = loads_exact(decode_body(body, charset))
    except RecursionError:
        return _unreadable("it nests too deep", status)
    except ValueError as exc:
        reason = getattr(exc, "msg", None) or "not valid JSON"
        return _unreadable(f"it is not valid JSON ({reason})", status)
    try:
        value = jmespath.search(pick, value)
    except jmespath.exceptions.JMESPathError:
        return error_result("the tool's answer does not fit its 'pick'", "unreadable", status)
    return cut_result(compact_json(value), max_chars, redactor, status)


def _unreadable(why: str, status: int) -> ToolResult:
    return error_result(f"the tool's answer could not be read: {why}", "unreadable", status)
