"""What the client sends, as it enters a run (docs/guardrails.md): its tools' answers and
its own new words, screened by the guardrails about them before the model reads them.

Only the history's tail is new in a request — the messages after its last assistant
turn (all of it, in a conversation's first request): the client's answers to the calls
that turn handed back (a restored mixed turn's too), and its user messages. What came
before was screened when it was new. A client tool's answer is screened by the
``tool_result`` guardrails about that tool (its source's label is ``client``): withheld,
it reads as the refusal; a user message by the ``input`` guardrails: withheld, the
request is refused (400 ``guardrail_blocked``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from gateway.config import GuardrailOn
from gateway.errors import GuardrailBlocked
from gateway.policy.guardrails import GuardVerdict, refusal_text
from gateway.policy.point import PolicyPoint
from gateway.values import Message, Part


@dataclass(slots=True)
class Admitted:
    """The history as the model may read it, the verdicts on its tail, the guardrail
    that tainted the run (if one did), and whether a message was changed."""

    history: list[Message]
    verdicts: list[GuardVerdict] = field(default_factory=list)
    taint: str | None = None
    changed: bool = False


async def admitted(policy: PolicyPoint, history: Sequence[Message]) -> Admitted:
    """``history`` with its new tail screened (``GuardrailBlocked`` if its input is
    withheld); asked only where guardrails screen what the client sends
    (``PolicyPoint.screens_client``)."""
    found = Admitted(list(history))
    last = max((i for i, m in enumerate(history) if m.role == "assistant"), default=-1)
    names = {c.id: c.name or "" for c in history[last].calls} if last >= 0 else {}
    for index in range(last + 1, len(history)):
        message = history[index]
        if message.role == "tool":
            name = names.get(message.call_id or "", "")
            screened = await _screened(policy, found, message, "tool_result", name)
        elif message.role == "user":
            screened = await _screened(policy, found, message, "input", "input")
        else:
            continue
        if screened is not message:
            found.history[index] = screened
            found.changed = True
    return found


async def _screened(
    policy: PolicyPoint, found: Admitted, message: Message, on: GuardrailOn, subject: str
) -> Message:
    """The message with each of its texts screened (a part that is no text, an image,
    passes as it came)."""
    content = message.content
    if isinstance(content, str):
        text = await _screen(policy, found, content, on, subject, message.call_id)
        return message if text == content else replace(message, content=text)
    if not content:
        return message
    parts: list[Part] = []
    for part in content:
        if part.text is not None:
            text = await _screen(policy, found, part.text, on, subject, message.call_id)
            part = part if text == part.text else replace(part, text=text)
        parts.append(part)
    return replace(message, content=tuple(parts))


async def _screen(
    policy: PolicyPoint,
    found: Admitted,
    text: str,
    on: GuardrailOn,
    subject: str,
    call_id: str | None,
) -> str:
    """The text the model may read: a withheld tool answer reads as the refusal; a
    withheld input refuses the request."""
    screened = await policy.screen(text, on, subject, call_id)
    found.verdicts += screened.verdicts
    if screened.taint is not None and found.taint is None:
        found.taint = screened.taint
    blocked = screened.blocked
    if blocked is None:
        return screened.text if screened.text is not None else text
    if on == "input":
        raise GuardrailBlocked(refusal_text(blocked))
    return refusal_text(blocked)
