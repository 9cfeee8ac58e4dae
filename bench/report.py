"""The bench's report: the machine it ran on, and the results as a Markdown table."""

from __future__ import annotations

import os
import platform
import shutil
from pathlib import Path
from typing import Any

from .console import lines as console_lines
from .guardrails import lines as guardrail_lines
from .load import CLIENT_TIMEOUT_S
from .search_rows import search_lines


def machine() -> dict[str, Any]:
    cpu = "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    try:
        import uvloop  # noqa: F401

        loop = "uvloop"
    except ImportError:
        loop = "asyncio"
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "system": platform.platform(),
        "loop": loop,
        "wrk": bool(shutil.which("wrk")),
    }


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        f"Run {report['when']} ({report['mode']}) on {m['cpu']}, {m['cores']} cores, "
        f"Python {m['python']}, {m['loop']}; load from "
        f"{'wrk' if m['wrk'] else 'bench.loadgen'} (streams: bench.loadgen).",
        "",
        "| scenario | conc. | req/s | p50 ms | p99 ms | server CPU µs/req | errors | notes |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, r in report["scenarios"].items():
        notes = []
        if "ttft_ms" in r:
            notes.append(
                f"TTFT p50 {r['ttft_ms'].get('p50')} ms, gap p50 {r['gap_ms'].get('p50')} ms"
            )
        if "rss_kib_after" in r:
            rss = ", ".join(f"{k}: {v // 1024} MiB" for k, v in r["rss_kib_after"].items())
            notes.append(f"RSS after {rss}; peak {r['peak_rss_kib'] // 1024} MiB")
        if r.get("timeouts"):
            notes.append(f"{r['timeouts']} over {CLIENT_TIMEOUT_S} s")
        lat = r["latency_ms"]
        lines.append(
            f"| {name} | {r.get('concurrency', '')} | {r['rps']} | {lat.get('p50')} | "
            f"{lat.get('p99')} | {r.get('server_cpu_us_per_request', '')} | "
            f"{r['errors']} | {'; '.join(notes)} |"
        )
    if "tool_search" in report:
        lines += ["", "Tool search (l):", ""]
        lines += [f"- {line}" for line in search_lines(report["tool_search"])]
    if "guardrails" in report:
        lines += ["", "Guardrails (n):", ""]
        lines += [f"- {line}" for line in guardrail_lines(report["guardrails"])]
    if "console" in report:
        lines += ["", "The console (m):", "", *console_lines(report["console"])]
    lines += ["", "| target | measured | bound | |", "|---|---:|---:|---|"]
    for t in report["targets"]:
        lines.append(
            f"| {t['target']} | {t['value']} | {t['bound']} | "
            f"{'pass' if t['pass'] else '**miss**'} |"
        )
    return "\n".join(lines) + "\n"
