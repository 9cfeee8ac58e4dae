"""(l) of ``make bench``: tool search on its own, in the bench's process after the
load scenarios — catalogs' weight and bytes per request, search latency
(``bench.search``) and retrieval quality on BFCL v4 (``bench.retrieval``) — and its
targets."""

from __future__ import annotations

from typing import Any

from . import retrieval, search


def tool_search() -> dict[str, Any]:
    """(l) Tool search on its own, in this process: catalogs' weight and bytes sent,
    search latency, and retrieval quality on BFCL v4 (``bench.search``,
    ``bench.retrieval``)."""
    return {"scale": search.measure(), "retrieval": retrieval.measure()}


def search_targets(found: dict[str, Any]) -> list[dict[str, Any]]:
    scale, quality = found["scale"], found["retrieval"]
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
            "(l) BFCL v4, preselect 8: expected tools all in the first round ≥ plain BM25's",
            quality["gateway"]["all"] / quality["plain_bm25"]["all"],
            1.0,
            "ratio",
        ),
        (
            "(l) BFCL v4, preselect 8: expected tools all in the first round ≥ 0.9 (the aim)",
            quality["gateway"]["all"],
            0.9,
            "ratio",
        ),
    ]
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
    return [*search.lines(found["scale"]), *retrieval.lines(found["retrieval"])]
