"""(l) of ``make bench``: tool search on its own, in the bench's process after the
load scenarios — catalogs' weight and bytes per request, search latency
(``bench.search``), retrieval quality on BFCL v4 (``bench.retrieval``) and for whole
tasks (``bench.tasks``, with a real embedding model) — and its targets."""

from __future__ import annotations

from typing import Any

from . import retrieval, search, tasks


def tool_search() -> dict[str, Any]:
    """(l) Tool search on its own, in this process: catalogs' weight and bytes sent,
    search latency, and retrieval quality on BFCL v4 (``bench.search``,
    ``bench.retrieval``)."""
    return {
        "scale": search.measure(),
        "retrieval": retrieval.measure(),
        "tasks": tasks.measure(),
    }


def search_targets(found: dict[str, Any]) -> list[dict[str, Any]]:
    scale, quality, whole = found["scale"], found["retrieval"], found["tasks"]
    checks = [
        (
            f"(l) {c['catalog']}: definitions sent in a round at max_loaded ≤ 3% of every tool's",
            c["max_loaded_share"],
            0.03,
            "max",
        )
        for c in scale["catalogs"]
    ]
    checks += [
        (
            "(l) a search among 5,000 of 10,000 tools, p99 ≤ 1 ms",
            scale["index"]["search_p99_ms"],
            1.0,
            "max",
        ),
        (
            "(l) BFCL v4, preselect 8, one part: all expected tools first ≥ plain BM25's",
            quality["gateway"]["all"] / quality["plain_bm25"]["all"],
            1.0,
            "ratio",
        ),
        (
            "(l) BFCL v4, preselect 8, one part: all expected tools first ≥ 0.9 (the aim)",
            quality["gateway"]["all"],
            0.9,
            "ratio",
        ),
    ]
    for ranking in ("words", "hybrid"):
        for label in ("turns", "tasks"):
            r = whole[ranking][label]
            checks += [
                (
                    f"(l) {label}, {ranking}: all tools in the first round ≥ 0.5",
                    r["all"],
                    0.5,
                    "ratio",
                ),
                (f"(l) {label}, {ranking}: average share found ≥ 0.8", r["share"], 0.8, "ratio"),
                (
                    f"(l) {label}, {ranking}: first round ≤ 3% of the bytes",
                    r["bytes_share"],
                    0.03,
                    "max",
                ),
            ]
        checks.append(
            (
                f"(l) BFCL v4 at the defaults, {ranking}: all tools in the first round ≥ 0.92",
                whole[ranking]["bfcl"]["all"],
                0.92,
                "ratio",
            )
        )
    return [
        {
            "target": name,
            "value": round(value, 3),
            "bound": bound,
            "pass": value >= bound if kind == "ratio" else value <= bound,
        }
        for name, value, bound, kind in checks
    ]


def search_lines(found: dict[str, Any]) -> list[str]:
    """The figures as the report's lines."""
    return [
        *search.lines(found["scale"]),
        *retrieval.lines(found["retrieval"]),
        *tasks.lines(found["tasks"]),
    ]
