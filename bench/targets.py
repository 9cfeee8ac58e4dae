"""The bench's targets: each a ratio or a bound over the scenarios of one run (``make
bench`` reports them beside the table), so they hold on a noisy machine."""

from __future__ import annotations

from typing import Any


def targets(r: dict[str, Any]) -> list[dict[str, Any]]:
    def p50(name: str) -> float:
        return float(r[name]["latency_ms"]["p50"])

    rss = list(r["h_long_run"]["rss_kib_after"].values())
    checks = [
        (
            "(c) pass-through rps ≥ 80% of baseline (c=32)",
            r["c_passthrough"]["rps"] / r["b_baseline"]["rps"],
            0.80,
            "ratio",
        ),
        (
            "(c) p50 added over direct at c=1 ≤ 1 ms",
            p50("c_passthrough_c1") - p50("a_direct_c1"),
            1.0,
            "max_ms",
        ),
        (
            "(d) one tool round rps ≥ 45% of (c)",
            r["d_tool_round"]["rps"] / r["c_passthrough"]["rps"],
            0.45,
            "ratio",
        ),
        (
            "(d) tool round CPU/request ≤ the baseline proxy's hand-made tool round's",
            r["d_tool_round"]["server_cpu_us_per_request"]
            / r["b_baseline_tool_round"]["server_cpu_us_per_request"],
            1.0,
            "max",
        ),
        (
            "(d) one tool round's server CPU/request ≤ 2.3 times (c)'s",
            r["d_tool_round"]["server_cpu_us_per_request"]
            / r["c_passthrough"]["server_cpu_us_per_request"],
            2.3,
            "max",
        ),
        (
            "(d) with a priced model and a day budget, rps ≥ 90% of (d)'s",
            r["d_tool_round_budget"]["rps"] / r["d_tool_round"]["rps"],
            0.90,
            "ratio",
        ),
        (
            "(c) with tracing on (every request sampled and exported), rps ≥ 50% of (c)'s",
            r["c_passthrough_traced"]["rps"] / r["c_passthrough"]["rps"],
            0.50,
            "ratio",
        ),
        (
            "(d) with tracing on (four spans a request), rps ≥ 50% of (d)'s",
            r["d_tool_round_traced"]["rps"] / r["d_tool_round"]["rps"],
            0.50,
            "ratio",
        ),
        (
            "(e) four parallel 200 ms tools add ≤ 220 ms (p50 vs (d) at c=4)",
            p50("e_parallel_tools_c4") - p50("d_tool_round_c4"),
            220.0,
            "max_ms",
        ),
        (
            "(f) time to first token ≤ direct + 1.5 ms (loop, p50)",
            r["f_stream_toolgate_loop"]["ttft_ms"]["p50"] - r["f_stream_direct"]["ttft_ms"]["p50"],
            1.5,
            "max_ms",
        ),
        (
            "(f) chunks not batched: p50 gap through Toolgate ≤ direct + 1 ms",
            r["f_stream_toolgate_loop"]["gap_ms"]["p50"] - r["f_stream_direct"]["gap_ms"]["p50"],
            1.0,
            "max_ms",
        ),
        ("(g) no errors at concurrency 256", r["g_slow_upstream_c256"]["errors"], 0, "max"),
        (
            "(n) a tool round with the built-in guardrails on its result and answer: "
            "rps ≥ 90% of without",
            r["n_tool_round_builtin_guardrails"]["rps"] / r["n_tool_round"]["rps"],
            0.90,
            "ratio",
        ),
        (
            "(n) a model judge (answering at once) adds ≤ 2 ms to a tool round's p50 at c=1",
            p50("n_tool_round_judged_c1") - p50("n_tool_round_c1"),
            2.0,
            "max_ms",
        ),
        (
            "(k) a tool round with tool search on, 32 tools in play: CPU/request ≤ 110% of off",
            r["k_tool_round_search_on"]["server_cpu_us_per_request"]
            / r["k_tool_round_search_off"]["server_cpu_us_per_request"],
            1.10,
            "max",
        ),
        (
            # Budgets, not the issue's: in process a Messages round costs 1.10 times a
            # chat round, and this ratio moved by ±0.1 between two runs here.
            "(l) a tool round on an Anthropic Messages upstream: CPU/request ≤ 125% of (d)'s",
            r["l_tool_round_anthropic"]["server_cpu_us_per_request"]
            / r["d_tool_round"]["server_cpu_us_per_request"],
            1.25,
            "max",
        ),
        (
            # Two SigV4 signatures by botocore a round, about 115 µs each in the app.
            "(l) a tool round on a Bedrock Converse upstream (SigV4): CPU/request ≤ 175% of (d)'s",
            r["l_tool_round_bedrock"]["server_cpu_us_per_request"]
            / r["d_tool_round"]["server_cpu_us_per_request"],
            1.75,
            "max",
        ),
        (
            "(l) a Messages client's tool round (POST /v1/messages): rps ≥ 80% of chat's (d)",
            r["l_tool_round_messages"]["rps"] / r["d_tool_round"]["rps"],
            0.80,
            "ratio",
        ),
        (
            "(i) Responses tool round rps ≥ 90% of chat's (d)",
            r["i_tool_round_responses"]["rps"] / r["d_tool_round"]["rps"],
            0.90,
            "ratio",
        ),
        (
            "(i) Responses time to first token ≤ 110% of chat's (loop, p50)",
            r["i_stream_toolgate_loop_responses"]["ttft_ms"]["p50"]
            / r["f_stream_toolgate_loop"]["ttft_ms"]["p50"],
            1.10,
            "max",
        ),
        (
            "(g) no collapse: rps at c=256 ≥ rps at c=32",
            r["g_slow_upstream_c256"]["rps"] / r["g_slow_upstream_c32"]["rps"],
            1.0,
            "ratio",
        ),
        ("(h) RSS after the long run within 10% of the early RSS", rss[1] / rss[0], 1.10, "max"),
        # What Python can do here (b_ideal: raw ASGI over one aiohttp session), issue 38.
        (
            "(c) pass-through rps ≥ 80% of the ideal pass-through's",
            r["c_passthrough"]["rps"] / r["b_ideal"]["rps"],
            0.80,
            "ratio",
        ),
        (
            "(c) pass-through CPU/request ≤ 1.25 times the ideal's",
            r["c_passthrough"]["server_cpu_us_per_request"]
            / r["b_ideal"]["server_cpu_us_per_request"],
            1.25,
            "max",
        ),
        (
            "(d) one tool round rps ≥ 70% of the ideal hand-made round's",
            r["d_tool_round"]["rps"] / r["b_ideal_tool_round"]["rps"],
            0.70,
            "ratio",
        ),
        (
            "(d) one tool round rps ≥ 2 times the starlette + httpx hand-made round's",
            r["d_tool_round"]["rps"] / r["b_baseline_tool_round"]["rps"],
            2.0,
            "ratio",
        ),
        (
            "(f) time to first token ≤ direct + 0.5 ms (pass-through, c=4, p50)",
            r["f_stream_toolgate_passthrough"]["ttft_ms"]["p50"]
            - r["f_stream_direct"]["ttft_ms"]["p50"],
            0.5,
            "max_ms",
        ),
        (
            # The bound above is under the floor here: the ideal relay (raw ASGI
            # over aiohttp, nothing else) itself adds about 0.9 ms over direct at c=4.
            "(f) time to first token ≤ the ideal relay's + 0.5 ms (pass-through, c=4, p50)",
            r["f_stream_toolgate_passthrough"]["ttft_ms"]["p50"]
            - r["f_stream_ideal"]["ttft_ms"]["p50"],
            0.5,
            "max_ms",
        ),
        (
            "(f) a stream's CPU/request ≤ 1.5 times the ideal relay's (pass-through)",
            r["f_stream_toolgate_passthrough"]["server_cpu_us_per_request"]
            / r["f_stream_ideal"]["server_cpu_us_per_request"],
            1.5,
            "max",
        ),
        (
            "(c) with tracing on at 10% sampling, rps ≥ 85% of (c)'s",
            r["c_passthrough_sampled"]["rps"] / r["c_passthrough"]["rps"],
            0.85,
            "ratio",
        ),
    ]
    if "j_two_replicas_redis" in r:
        checks.append(
            (
                "(j) two replicas on one Redis serve ≥ 1.2 times one's req/s (same load)",
                r["j_two_replicas_redis"]["rps"] / r["j_one_replica_redis"]["rps"],
                1.2,
                "ratio",
            )
        )
    out = []
    for name, value, bound, kind in checks:
        passed = value >= bound if kind == "ratio" else value <= bound
        out.append({"target": name, "value": round(value, 3), "bound": bound, "pass": passed})
    return out
