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
from gateway.errors import GatewayError
from gateway.policy.prices import Rates, read_usage, usd
from gateway.runtime.replayer import Replayed, Replayer, call_key


def _calls(rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [call for answer in rounds for call in answer.get("calls", [])]


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
    recording: dict[str, Any], replayed: Replayed, config: GatewayConfig | None = None
) -> dict[str, Any]:
    """The report of one replay."""
    before = _calls(recording.get("rounds", []))
    after = _calls(replayed.rounds)
    left = Counter(call_key(str(c.get("name")), c.get("arguments", "")) for c in before)
    names = {str(c.get("name")) for c in before}
    served = iter(replayed.tool_calls)
    calls = []
    for call in after:
        name = str(call.get("name"))
        key = call_key(name, call.get("arguments", ""))
        entry: dict[str, Any] = {"name": name, "arguments": _arguments(call.get("arguments"))}
        if left[key] > 0:
            left[key] -= 1
            entry["verdict"] = "same"
        elif name in names:
            entry["verdict"] = "different"
            entry["recorded_arguments"] = [
                _arguments(c.get("arguments")) for c in before if c.get("name") == name
            ]
        else:
            entry["verdict"] = "new"
        calls.append(entry)
    for entry, ledger in zip(calls, served, strict=False):
        entry["served"] = ledger["served"]
    missing = []
    for call in before:  # what no call of the replay took
        key = call_key(str(call.get("name")), call.get("arguments", ""))
        if left[key] > 0:
            left[key] -= 1
            missing.append(
                {"name": str(call.get("name")), "arguments": _arguments(call.get("arguments"))}
            )
    recorded_end = recording.get("ended")
    recorded_end = recorded_end if isinstance(recorded_end, dict) else {}
    replayed_end = replayed.ended or {}
    model = recording.get("model")
    agree = not missing and all(c["verdict"] == "same" for c in calls)
    return {
        "agree": agree,
        "models": {"recorded": model, "replayed": replayed.model},
        "calls": calls,
        "missing": missing,
        "rounds": {"recorded": len(recording.get("rounds", [])), "replayed": len(replayed.rounds)},
        "tokens": {
            "recorded": _tokens(recording.get("usage")),
            "replayed": _tokens(replayed.usage),
        },
        "cost_usd": {
            "recorded": _cost(
                config, model if isinstance(model, str) else None, recording.get("usage")
            ),
            "replayed": _cost(config, replayed.model, replayed.usage),
        },
        "finish_reason": {
            "recorded": recorded_end.get("finish_reason"),
            "replayed": replayed_end.get("finish_reason"),
        },
        "answer": {
            "recorded": recorded_end.get("content"),
            "replayed": replayed_end.get("content"),
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
    for name, recording in recordings:
        if not isinstance(recording, dict) or recording.get("kept") is False:
            failures.append(f"{name}: no kept recording")
        else:
            try:
                replayed = await replayer.replay(recording, model, tenant, live_read)
            except GatewayError as exc:
                failures.append(f"{name}: {exc.message}")
            else:
                reports.append({"source": name, **compare(recording, replayed, config)})
        if progress is not None:
            progress()
    return reports, failures
