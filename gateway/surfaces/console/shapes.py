"""What the console's pages show, shaped for their templates (docs/design.md §19): JSON
values indented to read, times as a person reads them, a run's timeline as SVG
coordinates, the overview's counts as small bar charts, a kept recording as a row.
Pure: no request, no store."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import orjson

from gateway.surfaces.operator.runs import Timeline

SHOWN_CHARS = 64 * 1024  # of a call's arguments a page shows


def pretty(arguments: Any) -> str:
    """A call's arguments to read: the JSON the model wrote, indented where it parses,
    cut past ``SHOWN_CHARS`` (a model may write megabytes: shown cut, not parsed)."""
    value = arguments
    if isinstance(arguments, str):
        if len(arguments) > SHOWN_CHARS:
            return _cut(arguments)
        try:
            value = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return arguments
    return _cut(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())


def _cut(text: str) -> str:
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}…[{len(text) - SHOWN_CHARS} more characters]"


def when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def moment(at: float | None) -> str:
    """A time as a ``datetime-local`` field holds it (UTC), or nothing."""
    return "" if at is None else datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M")


def dollars(value: float | None, none: str = "—") -> str:
    """An amount of dollars as a person reads it: ``$0.2500``, a small one to its
    digits (``$0.000076``, never ``7.6e-05``)."""
    if value is None:
        return none
    if value == 0 or abs(value) >= 0.0001:
        return f"${value:.4f}"
    return "$" + f"{value:.10f}".rstrip("0")


def took(ms: float | None) -> str:
    """A time taken as a person reads it: ``412.5 ms``, ``40.0 s``, ``3 min 12 s``."""
    if ms is None:
        return "—"
    if ms < 1000:
        return f"{ms:.1f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(round(ms / 1000), 60)
    return f"{minutes} min {seconds} s"


def budget_words(budget: Mapping[str, Any]) -> str:
    """A round's budget account, one figure after another: ``cost_usd`` as dollars,
    every other as it is, set apart (they read run together before)."""
    said = []
    for name, value in budget.items():
        if name.endswith("_usd") and isinstance(value, int | float):
            said.append(f"{name.removesuffix('_usd')} {dollars(float(value))}")
        else:
            said.append(f"{name} {value}")
    return ", ".join(said)


def plain(value: float | None) -> str:
    """A number as a form field holds it, never in exponent notation."""
    if value is None:
        return ""
    return f"{value:.10f}".rstrip("0").rstrip(".")


# A run's outcome (``engine.report.RunOutcome``) in the words of the Runs page.
OUTCOME_WORDS = {
    "failed": "failed",
    "cancelled": "client left",
    "blocked": "blocked by a guardrail",
    "capped": "cut by a cap or budget",
    "denied": "a call denied",
    "tool_failed": "a tool failed",
    "handed_back": "handed back",
    "passed_through": "passed through",
    "answered": "answered",
}
TROUBLED = frozenset(("failed", "blocked", "capped", "denied", "tool_failed"))


LANE_PX = 26  # a timeline lane's height, in the SVG's units (1000 across)
LABEL_CHARS = 40  # of a bar's label drawn
CHAR_UNITS = 7.0  # a label's character, at most, in the SVG's units (12 px type)


def _label_at(label: str, x: float, width: float) -> dict[str, Any]:
    """Where a bar's label goes: after the bar's start, or — where it would run past
    the right edge — ending at the bar's end (or the edge), never cut."""
    if x + 4 + CHAR_UNITS * len(label) <= 996:
        return {"label": label, "label_x": round(x + 4, 2), "anchor": "start"}
    end = min(max(x + width - 4, CHAR_UNITS * len(label) + 4), 996)
    return {"label": label, "label_x": round(end, 2), "anchor": "end"}


def steps(drawn: Timeline) -> list[dict[str, Any]]:
    """The timeline's bars as the SVG draws them (1000 units across) and the table
    lists them, each with what it was given and what it did."""
    total = drawn.total_ms or 1.0
    made = []
    for bar in drawn.bars:
        x = 1000 * bar.at_ms / total
        width = max(1000 * bar.duration_ms / total, 2.0)
        detail = bar.detail
        made.append(
            {
                "bar": bar,
                "x": round(x, 2),
                "y": 4 + bar.lane * LANE_PX,
                "width": round(width, 2),
                **_label_at(bar.label[:LABEL_CHARS], x, width),
                "arguments": pretty(detail.get("arguments")) if bar.kind == "call" else "",
                "policy": verdict_words(detail.get("policy")) if bar.kind == "call" else None,
                "offered": detail.get("tools_offered") if bar.kind == "round" else None,
                "usage": detail.get("usage") if bar.kind == "round" else None,
                "budget": detail.get("budget") if bar.kind == "round" else None,
            }
        )
    return made


# The policy point's verdicts (docs/design.md §13) as an operator names them.
_VERDICTS = {
    "run": "ran",
    "refuse": "refused",
    "hold": "held for approval",
    "approved": "approved",
    "denied": "denied",
    "expired": "no answer in time",
}


def verdict_words(why: Any) -> str | None:
    """A call's verdict in words (its rule, the taint behind it, who decided and why),
    from the ``policy`` of a trace's call: the store's, so anything not its shape is
    left out."""
    if not isinstance(why, dict):
        return None

    def text(key: str) -> str | None:
        value = why.get(key)
        return value[:200] if isinstance(value, str) and value else None

    verdict = text("verdict")
    words = [_VERDICTS.get(verdict, verdict) if verdict is not None else "decided"]
    if (rule := text("rule")) is not None:
        words.append(f"by rule {rule}")
    if (taint := text("taint")) is not None:
        words.append(f"after reading {taint}")
    if (binding := text("binding")) is not None:
        words.append(f"({binding})")
    if (decider := text("decider")) is not None:
        words.append(f"by the {decider}")
    elif why.get("approver") is None and "approver" in why:
        words.append("with no one to approve it")
    if (reason := text("reason")) is not None:
        words.append(f"saying: {reason}")
    if (approval := text("approval")) is not None:
        words.append(f"[{approval}]")
    return " ".join(words)


CHARTS = (
    ("requests", "Requests"),
    ("errors", "Errors"),
    ("tool_calls", "Tool calls"),
    ("cost_usd", "Spend"),
    ("latency_ms", "Latency (mean)"),
)


def charts(row: dict[str, Any], since: float) -> dict[str, Any]:
    """A tenant's row of the overview as small bar charts (120 by 32 units, a bar a
    minute), each bar titled with its minute and value."""
    made = []
    for name, label in CHARTS:
        values = row[name]
        top = max(values, default=0) or 1
        bars = []
        for i, value in enumerate(values):
            if not value:
                continue
            height = max(31 * value / top, 1.0)
            shown = _shown(name, value)
            minute = datetime.fromtimestamp(since + 60 * i, UTC).strftime("%H:%M")
            bars.append(
                {
                    "x": round(i * 2, 2),
                    "y": round(31 - height, 2),
                    "h": round(height, 2),
                    "title": f"{minute} UTC: {shown}",
                }
            )
        total = row["totals"][name]
        shown_total = _shown(name, total)
        made.append({"name": name, "label": label, "bars": bars, "total": shown_total})
    return {"id": row["id"], "pending_approvals": row["pending_approvals"], "charts": made}


def _shown(measure: str, value: float) -> str:
    if measure == "cost_usd":
        return dollars(value)
    if measure == "latency_ms":
        return f"{int(value):,} ms"
    return str(int(value))


def asked_of(request: Any) -> str:
    """What a recorded request last asked, in words, whichever surface it came by: a
    chat or Claude client's last user message (its text, or its text parts), a
    Responses client's ``input`` (a text, or its last user item's)."""
    if not isinstance(request, dict):
        return ""
    items = request.get("messages")
    if items is None:
        items = request.get("input")
    if isinstance(items, str):
        return items
    if not isinstance(items, list):
        return ""
    for item in reversed(items):
        if isinstance(item, dict) and item.get("role") == "user":
            return _text_of(item.get("content"))
    return ""


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts = [
        part["text"]
        for part in content
        if isinstance(part, dict) and isinstance(part.get("text"), str)
    ]
    return " ".join(texts)


def kept_row(recording: dict[str, Any]) -> dict[str, Any]:
    """A kept recording as the replay page lists it."""
    calls = recording.get("rounds")
    return {
        "request_id": recording.get("request_id", ""),
        "model": recording.get("model", ""),
        "asked": asked_of(recording.get("request"))[:200],
        "rounds": len(calls) if isinstance(calls, list) else 0,
    }


def guardrail_rows(trace: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The guardrails' verdicts a trace holds, each with its fields as text (a trace is
    the store's: what is not the shape is left out)."""
    rows = []
    for line in (trace or {}).get("guardrails") or []:
        if not isinstance(line, dict):
            continue
        found = line.get("found")
        rows.append(
            {
                key: str(line.get(key) or "")
                for key in ("guardrail", "screens", "subject", "action", "call_id", "error")
            }
            | {"found": [str(f) for f in found] if isinstance(found, list) else []}
        )
    return rows
