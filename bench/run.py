"""The benchmark: every scenario side by side in one invocation, so ratios hold on a
noisy machine. ``python -m bench.run [--full]`` writes ``bench/results/latest.json``
and ``latest.md``.

Processes: a fake upstream (answers at once), a second one with 50 ms latency, a fake
tool server, the baseline proxy, and Toolgate itself (``toolgate serve``, one worker),
all on loopback; the load comes from wrk (or ``bench.loadgen``) in its own process.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from . import console, guardrails
from .load import Load, measure
from .procs import Processes, cpu_seconds, free_port, memory_kib, redis_server
from .report import machine, markdown
from .search_rows import search_targets, tool_search
from .targets import targets

RESULTS = Path(__file__).resolve().parent / "results"
PLAIN_KEY, TOOLS_KEY = "bench-plain-key", "bench-tools-key"
SHARED_KEY = "bench-shared-key"  # a tenant with a request rate limit: Redis on every request
BUDGET_KEY = "bench-budget-key"  # a tenant with a day budget, on a priced model
# Tenants with 32 tools in play (two bench tools and 30 others), tool search on and off.
SEARCH_ON_KEY, SEARCH_OFF_KEY = "bench-search-on-key", "bench-search-off-key"
# Tenants whose tool results (and answers) are screened: by the built-in detectors, by a judge.
GUARDED_KEY, JUDGED_KEY = "bench-guarded-key", "bench-judged-key"
PADDING = 30  # tools beside the bench tools for the search tenants
CHAT = "/v1/chat/completions"
QUIET = ("--log-level", "warning")


def gateway_config(upstream: int, slow: int, tools: int, port: int) -> str:
    tool = (
        "{{name: {name}, parameters: {{type: object, properties: {{i: {{type: integer}}}}}}, "
        "http: {{url: 'http://127.0.0.1:{port}/tool?ms={ms}'}}}}"
    )
    nouns = ("invoice", "ticket", "order", "payment", "shipment", "customer")
    padding = "\n".join(
        f"  - {{name: pad_{i}, description: 'Look up the {nouns[i % 6]} {i} of an account "
        f"by its id.', parameters: {{type: object, properties: {{id: {{type: string}}}}}}, "
        f"http: {{url: 'http://127.0.0.1:{tools}/tool?ms=0'}}}}"
        for i in range(PADDING)
    )
    return f"""
server: {{host: 127.0.0.1, port: {port}}}
upstreams:
  - {{name: fast, base_url: "http://127.0.0.1:{upstream}/v1", max_retries: 0}}
  - {{name: slow, base_url: "http://127.0.0.1:{slow}/v1", max_retries: 0}}
  - {{name: claude, dialect: anthropic, base_url: "http://127.0.0.1:{upstream}", max_retries: 0}}
  - {{name: bedrock, dialect: bedrock, base_url: "http://127.0.0.1:{upstream}", region: us-east-1,
      max_retries: 0}}
models:
  - {{name: bench-plain, upstream: fast}}
  - {{name: bench-tool1, upstream: fast}}
  - {{name: bench-tools4, upstream: fast}}
  - {{name: bench-slow, upstream: slow}}
  - {{name: bench-guard, upstream: fast}}
  - {{name: bench-tool1-anthropic, upstream: claude, upstream_model: bench-tool1}}
  - {{name: bench-tool1-bedrock, upstream: bedrock, upstream_model: bench-tool1}}
  - {{name: bench-tool1-priced, upstream: fast, upstream_model: bench-tool1,
      price: {{input_per_mtok: 0.4, output_per_mtok: 1.6}}}}
tools:
  - {tool.format(name="bench_fast", port=tools, ms=0)}
  - {tool.format(name="bench_slow", port=tools, ms=200)}
{padding}
tenants:
  - {{id: plain, keys: [{PLAIN_KEY}], tools: []}}
  - {{id: tools, keys: [{TOOLS_KEY}], tools: ["bench_*"], limits: {{max_parallel_tools: 8}}}}
  - {{id: budget, keys: [{BUDGET_KEY}], tools: ["bench_*"],
      budget: {{cost_usd_per_day: 1000000, tokens_per_day: 1000000000000}}}}
  - {{id: shared, keys: [{SHARED_KEY}], tools: ["bench_*"],
      limits: {{requests_per_minute: 1000000000}}}}
  - {{id: search_on, keys: [{SEARCH_ON_KEY}], tools: ["bench_*", "pad_*"],
      tool_search: {{mode: "on", always: [bench_fast]}}}}
  - {{id: search_off, keys: [{SEARCH_OFF_KEY}], tools: ["bench_*", "pad_*"],
      tool_search: {{mode: "off"}}}}
  - {{id: guarded, keys: [{GUARDED_KEY}], tools: ["bench_*"],
      policy: {{guardrails: {{rules: [
        {{name: builtins, detect: [secrets, personal_data, injection], action: redact}},
        {{name: answers, screens: final_answer, detect: [personal_data], action: redact}}]}}}}}}
  - {{id: judged, keys: [{JUDGED_KEY}], tools: ["bench_*"],
      policy: {{guardrails: {{rules: [
        {{name: judge, kind: model, model: bench-guard, action: block}}]}}}}}}
"""


RESPONSES = "/v1/responses"
MESSAGES = "/v1/messages"
# Static keys from the environment: each of the bedrock upstream's requests is signed.
AWS = {
    "AWS_ACCESS_KEY_ID": "AKIDBENCH",
    "AWS_SECRET_ACCESS_KEY": "bench-secret",
    "AWS_EC2_METADATA_DISABLED": "true",
}
FLOOR = "/v1/floor/tool-round"  # the baseline proxy's hand-made tool round


def body(model: str, stream: bool = False, api: str = "chat") -> dict[str, Any]:
    payload: dict[str, Any] = {"model": model}
    if api == "responses":
        payload["input"] = "What is the answer?"
    elif api == "messages":
        payload["max_tokens"] = 256
        payload["messages"] = [{"role": "user", "content": "What is the answer?"}]
    else:
        payload["messages"] = [{"role": "user", "content": "What is the answer?"}]
    if stream:
        payload["stream"] = True
    return payload


class Bench:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.procs = Processes(work)
        names = [
            *("upstream", "slow", "tools", "base", "ideal", "gw", "collector", "gw_traced"),
            "gw_sampled",
            *("redis", "replica_a", "replica_b"),
        ]
        self.ports = {name: free_port() for name in names}

    def start(self) -> None:
        p = self.ports
        self.procs.python(
            "upstream", ["bench.fakes", "upstream", "--port", str(p["upstream"])], p["upstream"]
        )
        self.procs.python(
            "slow",
            ["bench.fakes", "upstream", "--port", str(p["slow"]), "--latency-ms", "50"],
            p["slow"],
        )
        self.procs.python("tools", ["bench.fakes", "tools", "--port", str(p["tools"])], p["tools"])
        collector = ["bench.fakes", "collector", "--port", str(p["collector"])]
        self.procs.python("collector", collector, p["collector"])
        self.procs.python(
            "baseline",
            [
                "uvicorn",
                "bench.baseline_proxy:app",
                "--port",
                str(p["base"]),
                "--log-level",
                "warning",
                "--no-access-log",
            ],
            p["base"],
            env={
                "UPSTREAM": f"http://127.0.0.1:{p['upstream']}",
                "TOOLS": f"http://127.0.0.1:{p['tools']}",
            },
        )
        # What Python can do here: raw ASGI over one aiohttp session, under the same uvicorn.
        self.procs.python(
            "ideal",
            [
                "uvicorn",
                "bench.ideal_proxy:app",
                "--port",
                str(p["ideal"]),
                "--log-level",
                "warning",
                "--no-access-log",
            ],
            p["ideal"],
            env={
                "UPSTREAM": f"http://127.0.0.1:{p['upstream']}",
                "TOOLS": f"http://127.0.0.1:{p['tools']}",
            },
        )
        config = self.work / "gateway.yaml"
        config.write_text(gateway_config(p["upstream"], p["slow"], p["tools"], p["gw"]))
        toolgate = str(Path(sys.executable).parent / "toolgate")
        self.pids = {
            "direct": self.procs.pid("upstream"),
            "baseline": self.procs.pid("baseline"),
            "ideal": self.procs.pid("ideal"),
        }
        self.gateway = self.procs.start(
            "toolgate",
            [toolgate, "serve", "--config", str(config), "--log-level", "warning"],
            p["gw"],
            env=AWS,  # the bedrock upstream's requests are signed, as in production
        )
        self.pids["toolgate"] = self.gateway.pid
        # Every gateway logs as the measured one does (warnings only): a log line per
        # request would be measured as what tracing costs.
        serve = [toolgate, "serve", "--config", str(config), *QUIET]
        # The same gateway with tracing on: every request sampled, exported over OTLP/HTTP.
        traced = self.procs.start(
            "toolgate-traced",
            [*serve, "--port", str(p["gw_traced"])],
            p["gw_traced"],
            env={"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{p['collector']}"},
        )
        self.pids["toolgate_traced"] = traced.pid
        # And at 10% sampling, as production runs it.
        sampled = self.procs.start(
            "toolgate-sampled",
            [*serve, "--port", str(p["gw_sampled"])],
            p["gw_sampled"],
            env={
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{p['collector']}",
                "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                "OTEL_TRACES_SAMPLER_ARG": "0.1",
            },
        )
        self.pids["toolgate_sampled"] = sampled.pid
        self.replicas = self._replicas(toolgate, config)

    def _replicas(self, toolgate: str, config: Path) -> bool:
        """Two more gateways sharing one Redis (a redis-server of the bench's own), for
        the scale-out rows; False when there is no redis-server here."""
        p = self.ports
        if shutil.which("redis-server") is None:
            return False
        self.procs.start("redis", redis_server(p["redis"]), p["redis"])
        shared = self.work / "shared.yaml"
        store = f"store: {{url: 'redis://127.0.0.1:{p['redis']}/0', timeout_s: 0.5}}\n"
        shared.write_text(config.read_text() + store)
        for name in ("replica_a", "replica_b"):
            started = self.procs.start(
                name.replace("_", "-"),
                [toolgate, "serve", "--config", str(shared), "--port", str(p[name]), *QUIET],
                p[name],
            )
            self.pids[name] = started.pid
        return True

    def url(self, target: str, api: str = "chat") -> str:
        port = {
            "direct": "upstream",
            "baseline": "base",
            "ideal": "ideal",
            "toolgate": "gw",
            "toolgate_traced": "gw_traced",
            "toolgate_sampled": "gw_sampled",
            "replica_a": "replica_a",
            "replica_b": "replica_b",
        }[target]
        path = {"chat": CHAT, "responses": RESPONSES, "floor": FLOOR, "messages": MESSAGES}[api]
        return f"http://127.0.0.1:{self.ports[port]}{path}"

    def load(self, target: str, model: str, key: str = PLAIN_KEY, **options: Any) -> Load:
        """``api="responses"``: the same request through ``POST /v1/responses``
        (``"messages"``: through ``POST /v1/messages``)."""
        served = target.startswith(("toolgate", "replica"))
        headers = {"authorization": f"Bearer {key}"} if served else {}
        stream = options.pop("stream", False)
        api = options.pop("api", "chat")
        return Load(
            self.url(target, api),
            body(model, stream, api),
            stream=stream,
            headers=headers,
            pid=self.pids[target],
            **options,
        )


def measured(load: Load) -> dict[str, Any]:
    """One measurement, with the CPU time the serving process spent per request."""
    before = cpu_seconds(load.pid) if load.pid else 0.0
    result = measure(load)
    if load.pid and result["requests"]:
        spent = cpu_seconds(load.pid) - before
        result["server_cpu_us_per_request"] = round(spent / result["requests"] * 1e6, 1)
    return result


def side_by_side(loads: dict[str, Load], rounds: int) -> dict[str, dict[str, Any]]:
    """Run each load ``rounds`` times, interleaved; keep the run with the median rps."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in loads}
    for _ in range(rounds):
        for name, load in loads.items():
            runs[name].append(measured(load))
    chosen = {}
    for name, results in runs.items():
        ordered = sorted(results, key=lambda r: r["rps"])
        chosen[name] = {
            **ordered[len(ordered) // 2],
            "concurrency": loads[name].concurrency,
            "rounds_rps": [r["rps"] for r in results],
        }
    return chosen


def run(full: bool) -> dict[str, Any]:
    seconds, rounds = (10.0, 3) if full else (4.0, 2)
    long_run = (10_000, 100_000) if full else (3_000, 30_000)
    with tempfile.TemporaryDirectory() as work:
        bench = Bench(Path(work))
        try:
            bench.start()
            return _scenarios(bench, seconds, rounds, long_run)
        finally:
            bench.procs.stop()


def _scenarios(
    bench: Bench, seconds: float, rounds: int, long_run: tuple[int, int]
) -> dict[str, Any]:
    L: Callable[..., Load] = bench.load
    results = side_by_side(
        {
            "a_direct": L("direct", "bench-plain", concurrency=32, seconds=seconds),
            "b_baseline": L("baseline", "bench-plain", concurrency=32, seconds=seconds),
            "b_ideal": L("ideal", "bench-plain", concurrency=32, seconds=seconds),
            "c_passthrough": L("toolgate", "bench-plain", concurrency=32, seconds=seconds),
            "d_tool_round": L(
                "toolgate", "bench-tool1", TOOLS_KEY, concurrency=32, seconds=seconds
            ),
            "d_tool_round_budget": L(
                "toolgate", "bench-tool1-priced", BUDGET_KEY, concurrency=32, seconds=seconds
            ),
            "c_passthrough_traced": L(
                "toolgate_traced", "bench-plain", concurrency=32, seconds=seconds
            ),
            "c_passthrough_sampled": L(
                "toolgate_sampled", "bench-plain", concurrency=32, seconds=seconds
            ),
            "d_tool_round_traced": L(
                "toolgate_traced", "bench-tool1", TOOLS_KEY, concurrency=32, seconds=seconds
            ),
            "b_baseline_tool_round": L(
                "baseline", "bench-tool1", concurrency=32, seconds=seconds, api="floor"
            ),
            "b_ideal_tool_round": L(
                "ideal", "bench-tool1", concurrency=32, seconds=seconds, api="floor"
            ),
            "i_tool_round_responses": L(
                "toolgate",
                "bench-tool1",
                TOOLS_KEY,
                concurrency=32,
                seconds=seconds,
                api="responses",
            ),
            "l_tool_round_anthropic": L(
                "toolgate", "bench-tool1-anthropic", TOOLS_KEY, concurrency=32, seconds=seconds
            ),
            "l_tool_round_bedrock": L(
                "toolgate", "bench-tool1-bedrock", TOOLS_KEY, concurrency=32, seconds=seconds
            ),
            "l_tool_round_messages": L(
                "toolgate",
                "bench-tool1",
                TOOLS_KEY,
                concurrency=32,
                seconds=seconds,
                api="messages",
            ),
        },
        rounds,
    )
    results |= side_by_side(
        {
            "k_tool_round_search_off": L(
                "toolgate", "bench-tool1", SEARCH_OFF_KEY, concurrency=32, seconds=seconds
            ),
            "k_tool_round_search_on": L(
                "toolgate", "bench-tool1", SEARCH_ON_KEY, concurrency=32, seconds=seconds
            ),
        },
        rounds,
    )
    results |= side_by_side(
        {
            "n_tool_round": L(
                "toolgate", "bench-tool1", TOOLS_KEY, concurrency=32, seconds=seconds
            ),
            "n_tool_round_builtin_guardrails": L(
                "toolgate", "bench-tool1", GUARDED_KEY, concurrency=32, seconds=seconds
            ),
            "n_tool_round_judged": L(
                "toolgate", "bench-tool1", JUDGED_KEY, concurrency=32, seconds=seconds
            ),
            "n_tool_round_c1": L(
                "toolgate", "bench-tool1", TOOLS_KEY, concurrency=1, seconds=seconds
            ),
            "n_tool_round_judged_c1": L(
                "toolgate", "bench-tool1", JUDGED_KEY, concurrency=1, seconds=seconds
            ),
        },
        rounds,
    )
    results |= side_by_side(
        {
            "a_direct_c1": L("direct", "bench-plain", concurrency=1, seconds=seconds),
            "c_passthrough_c1": L("toolgate", "bench-plain", concurrency=1, seconds=seconds),
            "d_tool_round_c4": L(
                "toolgate", "bench-tool1", TOOLS_KEY, concurrency=4, seconds=seconds
            ),
            "e_parallel_tools_c4": L(
                "toolgate", "bench-tools4", TOOLS_KEY, concurrency=4, seconds=seconds
            ),
        },
        rounds,
    )
    results |= side_by_side(
        {
            "f_stream_direct": L(
                "direct", "bench-plain", concurrency=4, seconds=seconds, stream=True
            ),
            "f_stream_ideal": L(
                "ideal", "bench-plain", concurrency=4, seconds=seconds, stream=True
            ),
            "f_stream_toolgate_loop": L(
                "toolgate", "bench-plain", TOOLS_KEY, concurrency=4, seconds=seconds, stream=True
            ),
            "f_stream_toolgate_passthrough": L(
                "toolgate", "bench-plain", concurrency=4, seconds=seconds, stream=True
            ),
            "i_stream_toolgate_loop_responses": L(
                "toolgate",
                "bench-plain",
                TOOLS_KEY,
                concurrency=4,
                seconds=seconds,
                stream=True,
                api="responses",
            ),
        },
        1,
    )
    results |= side_by_side(
        {
            "g_slow_upstream_c32": L("toolgate", "bench-slow", concurrency=32, seconds=seconds),
            "g_slow_upstream_c256": L("toolgate", "bench-slow", concurrency=256, seconds=seconds),
        },
        1,
    )
    if bench.replicas:
        results |= _scale_out(bench, seconds, rounds)
    results["h_long_run"] = _long_run(bench, *long_run)
    return results


def _scale_out(bench: Bench, seconds: float, rounds: int) -> dict[str, Any]:
    """(j) The same total load (a tool round, concurrency 32, a tenant whose rate limit
    is checked in Redis on every request) on one gateway process, then split over two
    processes sharing that Redis; interleaved, the median kept."""
    one = bench.load("replica_a", "bench-tool1", SHARED_KEY, concurrency=32, seconds=seconds)
    halves = [
        bench.load(name, "bench-tool1", SHARED_KEY, concurrency=16, seconds=seconds)
        for name in ("replica_a", "replica_b")
    ]
    runs: dict[str, list[dict[str, Any]]] = {"j_one_replica_redis": [], "j_two_replicas_redis": []}
    for _ in range(rounds):
        runs["j_one_replica_redis"].append(measured(one))
        with ThreadPoolExecutor(2) as pool:
            both = list(pool.map(measure, halves))
        runs["j_two_replicas_redis"].append(
            {
                "generator": both[0]["generator"],
                "requests": sum(r["requests"] for r in both),
                "errors": sum(r["errors"] for r in both),
                "rps": round(sum(r["rps"] for r in both), 1),
                "latency_ms": {
                    q: max(r["latency_ms"].get(q, 0.0) for r in both) for q in both[0]["latency_ms"]
                },
            }
        )
    chosen = {}
    for name, results in runs.items():
        ordered = sorted(results, key=lambda r: r["rps"])
        chosen[name] = {
            **ordered[len(ordered) // 2],
            "concurrency": 32,
            "rounds_rps": [r["rps"] for r in results],
        }
    return chosen


def _long_run(bench: Bench, first: int, total: int) -> dict[str, Any]:
    """RSS after ``first`` requests and after ``total``: does memory grow with traffic?"""
    load = bench.load("toolgate", "bench-plain", concurrency=32, requests=first)
    early = measured(load)
    after_first = memory_kib(bench.gateway.pid)
    rest = measured(bench.load("toolgate", "bench-plain", concurrency=32, requests=total - first))
    after_total = memory_kib(bench.gateway.pid)
    return {
        "generator": rest["generator"],
        "concurrency": 32,
        "requests": early["requests"] + rest["requests"],
        "errors": early["errors"] + rest["errors"],
        "rps": rest["rps"],
        "latency_ms": rest["latency_ms"],
        "rss_kib_after": {str(first): after_first["rss_kib"], str(total): after_total["rss_kib"]},
        "peak_rss_kib": after_total["peak_rss_kib"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.run")
    parser.add_argument("--full", action="store_true", help="longer runs, 100k-request soak")
    args = parser.parse_args()
    started = time.time()
    scenarios = run(args.full)
    search = tool_search()
    pages = console.measure()
    guarding = guardrails.measure()
    report = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "mode": "full" if args.full else "quick",
        "seconds": round(time.time() - started, 1),
        "machine": machine(),
        "scenarios": scenarios,
        "tool_search": search,
        "console": pages,
        "guardrails": guarding,
        "targets": targets(scenarios)
        + search_targets(search)
        + console.targets(pages)
        + guardrails.targets(guarding),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "latest.json").write_text(json.dumps(report, indent=2) + "\n")
    table = markdown(report)
    (RESULTS / "latest.md").write_text(table)
    if args.full:
        (RESULTS / "full.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
