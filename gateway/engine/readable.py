"""Every text a client can read of an answer, in one list (docs/design.md §21): what the
guardrails on final answers screen, whatever surface renders it.

- the turn's ``content`` and ``refusal``;
- every other text of the upstream's own message the chat surface passes on as it came
  (``reasoning_content``, ``reasoning``: any string field of ``raw``'s message);
- the text of each Anthropic thinking block the Messages surface shows (``carried``);
- the arguments of each call handed back to the client.

``with_texts`` puts the guardrails' texts back in their places. A thinking block whose text
a guardrail changed is not shown at all: its signature covers its text, so it cannot be
shown redacted, and the provider would refuse it altered. The run's own turn (the one a
hand-back keeps for its continuation) still holds it as it came: that is what travels
back upstream (docs/guardrails.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from gateway.policy.guardrails import refusal_text
from gateway.policy.ledger import Ledger
from gateway.policy.point import PolicyPoint
from gateway.values import AssistantMessage, Completion, ToolCall
from tool_registry import immutable

# The message fields the turn types, rendered from it: not read again from ``raw``.
_TYPED = frozenset({"role", "content", "refusal"})


@immutable
class Readable:
    """One text a client can read: where it is, and the text."""

    where: tuple[str, int | str]  # ("content", 0), ("raw", field), ("thinking", i), ("call", i)
    text: str


def _raw_message(answer: Completion) -> Mapping[str, Any] | None:
    raw = answer.raw
    choices = raw.get("choices") if isinstance(raw, Mapping) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, Mapping) else None
    return message if isinstance(message, Mapping) else None


def _thinking(block: Mapping[str, Any]) -> str | None:
    text = block.get("thinking")
    return text if block.get("type") == "thinking" and isinstance(text, str) else None


def readable(
    answer: Completion, calls: Sequence[ToolCall] = (), texts: bool = True
) -> list[Readable]:
    """Every text of ``answer`` (and of ``calls``, handed back with it) a client reads;
    the calls' alone where the answer's ``texts`` were screened already (a stream's)."""
    turn = answer.turn
    found: list[Readable] = []
    if not texts:
        return [Readable(("call", i), c.arguments) for i, c in enumerate(calls) if c.arguments]
    if turn.content:
        found.append(Readable(("content", 0), turn.content))
    if turn.refusal:
        found.append(Readable(("refusal", 0), turn.refusal))
    message = _raw_message(answer)
    for name, value in (message or {}).items():
        if name not in _TYPED and isinstance(value, str) and value:
            found.append(Readable(("raw", name), value))
    for index, block in enumerate(turn.carried):
        text = _thinking(block)
        if text:
            found.append(Readable(("thinking", index), text))
    for index, call in enumerate(calls):
        if call.arguments:
            found.append(Readable(("call", index), call.arguments))
    return found


def with_texts(
    answer: Completion, calls: Sequence[ToolCall], texts: Mapping[tuple[str, int | str], str]
) -> tuple[Completion, tuple[ToolCall, ...]]:
    """``answer`` and ``calls`` with ``texts`` (by ``Readable.where``: those a guardrail
    changed) in their places."""
    turn = answer.turn
    content = texts.get(("content", 0), turn.content)
    refusal = texts.get(("refusal", 0), turn.refusal)
    carried = tuple(
        block for index, block in enumerate(turn.carried) if ("thinking", index) not in texts
    )
    raw = answer.raw
    if texts and _raw_message(answer) is not None:
        assert raw is not None  # a raw message is found only in a raw answer
        # The upstream's own fields of the message, the changed texts in place; its
        # logprobs go (they would tell the text as it was).
        fields = {name: text for (kind, name), text in texts.items() if kind == "raw"}
        [first, *rest] = raw["choices"]
        message = {**first["message"], **fields}
        raw = {**raw, "choices": [{**first, "message": message, "logprobs": None}, *rest]}
    new_turn = replace(turn, content=content, refusal=refusal, carried=carried)
    handed = tuple(
        replace(call, arguments=texts.get(("call", index), call.arguments))
        for index, call in enumerate(calls)
    )
    return replace(answer, turn=new_turn, raw=raw), handed


async def screened_answer(
    policy: PolicyPoint,
    ledger: Ledger,
    answer: Completion,
    finish: str,
    calls: tuple[ToolCall, ...] = (),
    texts: bool = True,
) -> tuple[Completion, str, tuple[ToolCall, ...] | None]:
    """A final answer (and the calls handed back with it) after the guardrails on final
    answers, each text a client can read of it screened (``readable``; only the calls'
    without ``texts``): as it was, redacted, or withheld (``content_filter``, the
    refusal its text, no calls: None). The verdicts go to ``ledger``."""
    found = readable(answer, calls, texts)
    if not found:
        return answer, finish, calls
    results = await asyncio.gather(
        *(policy.screen(item.text, "final_answer", "final_answer") for item in found)
    )
    changed: dict[tuple[str, int | str], str] = {}
    blocked = None
    for item, result in zip(found, results, strict=True):
        ledger.guarded += result.verdicts
        if result.blocked is not None:
            blocked = blocked or result.blocked
        elif result.text != item.text:
            changed[item.where] = result.text or ""
    if blocked is not None:
        turn = AssistantMessage(refusal_text(blocked))
        return replace(answer, turn=turn, raw=None), "content_filter", None
    if not changed:
        return answer, finish, calls
    answer, calls = with_texts(answer, calls, changed)
    return answer, finish, calls
