"""Comparing a recorded trajectory with its replay (issue 26): pure, no I/O.

Each call of the replay is ``same`` (a recorded call of that name had canonically equal
arguments), ``different`` (the recording called that tool, with other arguments: the
recorded ones are shown beside) or ``new`` (the recording never called that tool); a
recorded call the replay did not make is ``missing``. The trajectories agree when every
call is the same and none is missing. Rounds, tokens, cost (where the models are
priced), the finish reason and both final answers are set side by side.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from gateway.config import GatewayConfig
from gateway.engine.recorded import Ending, Recording, RecordingUnreadable, decode
from gateway.errors import GatewayError
from gateway.ops.offload import offload
from gateway.policy.prices import Rates, read_usage, usd
from gateway.runtime.replayer import Replayed, Replayer, call_key


def _arguments(text: Any) -> Any:
    if isinstance(text, str):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def _cost(config: GatewayConfig | None, model: str | None, usage: Any) -> float | None:
    if config is None or model is None:
        return None
    price = next((m.price for m in config.models if m.name == model), None)
    counts = read_usage(usage)
    if price is None or counts is None:
        return None
    return usd(counts.nanos(Rates.of(price)))


def _tokens(usage: Any) -> int | None:
    counts = read_usage(usage)
    return None if counts is None else counts.total


def compare(
    recording: Recording, replayed: Replayed, config: GatewayConfig | None = None
) -> dict[str, Any]:
    """The report of one replay."""
    before = recording.calls()
    after = [call for answered in replayed.rounds for call in answered.answer.turn.calls]
    left = Counter(call_key(str(c.name), c.arguments) for c in before)
    names = {str(c.name) for c in before}
    served = iter(replayed.tool_calls)
    calls = []
    for call in after:
        name = str(call.name)
        key = call_key(name, call.arguments)
        entry: dict[str, Any] = {"name": name, "arguments": _arguments(call.arguments)}
        if left[key] > 0:
            left[key] -= 1
            entry["verdict"] = "same"
        elif name in names:
            entry["verdict"] = "different"
            entry["recorded_arguments"] = [
                _arguments(c.arguments) for c in before if c.name == name
            ]
        else:
            entry["verdict"] = "new"
        calls.append(entry)
    for entry, made in zip(calls, served, strict=False):
        entry["served"] = made.served
    missing = []
    for call in before:  # what no call of the replay took
        key = call_key(str(call.name), call.arguments)
        if left[key] > 0:
            left[key] -= 1
            missing.append({"name": str(call.name), "arguments": _arguments(call.arguments)})
    recorded_end = recording.ended or Ending("final")
    replayed_end = replayed.ended or Ending("final")
    model = recording.model
    agree = not missing and all(c["verdict"] == "same" for c in calls)
    return {
        "agree": agree,
        "models": {"recorded": model, "replayed": replayed.model},
        "calls": calls,
        "missing": missing,
        "rounds": {"recorded": len(recording.rounds), "replayed": len(replayed.rounds)},
        "tokens": {
            "recorded": _tokens(recording.usage),
            "replayed": _tokens(replayed.usage),
        },
        "cost_usd": {
            "recorded": _cost(config, model, recording.usage),
            "replayed": _cost(config, replayed.model, replayed.usage),
        },
        "finish_reason": {
            "recorded": recorded_end.finish_reason,
            "replayed": replayed_end.finish_reason,
        },
        "answer": {
            "recorded": recorded_end.content,
            "replayed": replayed_end.content,
        },
        "error": replayed.error,
        "warnings": replayed.warnings,
    }


def summary(reports: list[dict[str, Any]], failures: list[str]) -> dict[str, Any]:
    """What a batch of replays came to: how many agree, rounds and cost before and after,
    the differences by kind, and the recordings that could not be replayed."""
    verdicts: dict[str, int] = {"different": 0, "new": 0, "missing": 0, "error": 0}
    totals: dict[str, list[float]] = {"rounds": [0, 0], "cost_usd": [0, 0], "tokens": [0, 0]}
    for report in reports:
        for call in report["calls"]:
            if call["verdict"] != "same":
                verdicts[call["verdict"]] += 1
        verdicts["missing"] += len(report["missing"])
        verdicts["error"] += report.get("error") is not None
        for what, pair in totals.items():
            for side, index in (("recorded", 0), ("replayed", 1)):
                value = report[what][side]
                if isinstance(value, int | float):
                    pair[index] += value
    agreeing = sum(r["agree"] for r in reports)
    return {
        "replayed": len(reports),
        "agree": agreeing,
        "agreement": round(agreeing / len(reports), 4) if reports else None,
        "rounds": {"recorded": int(totals["rounds"][0]), "replayed": int(totals["rounds"][1])},
        "tokens": {"recorded": int(totals["tokens"][0]), "replayed": int(totals["tokens"][1])},
        "cost_usd": {
            "recorded": round(totals["cost_usd"][0], 9),
            "replayed": round(totals["cost_usd"][1], 9),
        },
        "differences": verdicts,
        "not_replayed": failures,
    }


async def replay_all(
    replayer: Replayer,
    recordings: Iterable[tuple[str, Any]],
    model: str,
    tenant: str | None = None,
    live_read: bool = False,
    config: GatewayConfig | None = None,
    progress: Callable[[], None] | None = None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Each named recording replayed in turn: the reports (each with its ``source``),
    and why each one that could not be replayed was not (``progress`` after each)."""
    reports: list[dict[str, Any]] = []
    failures: list[str] = []
    for name, document in recordings:
        if not isinstance(document, dict) or document.get("kept") is False:
            failures.append(f"{name}: no kept recording")
        else:
            try:
                # Off the event loop: a recording holds a whole request's history.
                recording = await offload(True, decode, document)
                replayed = await replayer.replay(recording, model, tenant, live_read)
            except RecordingUnreadable as exc:
                failures.append(f"{name}: The recording cannot be replayed: {exc}.")
            except GatewayError as exc:
                failures.append(f"{name}: {exc.message}")
            else:
                reports.append({"source": name, **compare(recording, replayed, config)})
        if progress is not None:
            progress()
    return reports, failures
