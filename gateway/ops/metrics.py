"""Prometheus metrics (docs/design.md §9). Labels stay small and bounded: tenant, model,
upstream and tool names come from the configuration, outcomes and status classes from
short fixed lists — never a request id, user text or argument."""

from __future__ import annotations

import os
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, multiprocess
from prometheus_client.exposition import choose_encoder

from gateway.ops.metric_values import Counts, Maker, Observes

# LLM requests take from tens of milliseconds to minutes.
LATENCY_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)
TOOL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
ITERATION_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50)
EMBEDDING_KINDS = ("query", "catalog", "probe")
EMBEDDING_OUTCOMES = ("ok", "timeout", "error")
APPROVAL_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 900, 1800, 3600)

UNKNOWN = "(unknown)"
NONE = "(none)"

# The fixed label values, primed at start so every series exists before its first event.
PRIMED_VERDICTS = ("run", "refuse", "hold")  # the policy point's (a decision adds others)
STATUS_CLASSES = ("2xx", "4xx", "5xx")
UPSTREAM_STATUSES = (*STATUS_CLASSES, "error", "timeout")
# ``cached_prompt`` (read from a prompt cache) and ``cache_write_prompt`` (written to it)
# are parts of ``prompt``, ``reasoning`` part of ``completion``.
TOKEN_KINDS = ("prompt", "completion", "cached_prompt", "cache_write_prompt", "reasoning")
RATE_KINDS = ("requests", "tokens")
CACHE_RESULTS = ("hit", "miss")
RELOAD_RESULTS = ("ok", "error")
# Why a span never reached the collector (docs/design.md §14).
SPAN_DROPS = ("queue_full", "export_failed")


PRIMED_TOOLS = 512  # a larger catalog's tools get their series at their first call


@dataclass(frozen=True)
class Labels:
    """What the configuration says a label may be: each tenant with its models and
    tools, the upstreams, the tools, and the fixed lists of the code."""

    tenants: dict[str, tuple[list[str], list[str]]]  # id → (models, tools)
    upstreams: list[str]
    tools: dict[str, str]  # name → source (http, openapi, mcp)
    outcomes: tuple[str, ...]
    cap_kinds: tuple[str, ...]
    guardrails: tuple[tuple[str, str], ...] = ()  # (name, action) of each configured one


def status_class(status: int) -> str:
    return f"{status // 100}xx"


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


class RequestSeries:
    """A tenant and model's series of the request metrics (``Metrics.series``), found
    once: a request's end counts itself without a lookup by label values per metric.
    A series is made at its first use, as ``labels`` would make it."""

    __slots__ = ("_answered", "_first_byte", "_labels", "_metrics", "_tokens", "seconds")

    def __init__(self, metrics: Metrics, tenant: str, model: str) -> None:
        self._metrics = metrics
        self._labels = (tenant, model)
        self.seconds = metrics.request_seconds.labels(tenant, model)
        self._answered: dict[int, Counts] = {}
        self._first_byte: Observes | None = None
        self._tokens: dict[str, Counts] = {}

    def answered(self, status: int) -> Counts:
        """``toolgate_requests_total`` of the status's class."""
        found = self._answered.get(status // 100)
        if found is None:
            tenant, model = self._labels
            found = self._metrics.requests.labels(tenant, model, status_class(status))
            self._answered[status // 100] = found
        return found

    def first_byte(self) -> Observes:
        if self._first_byte is None:
            self._first_byte = self._metrics.first_byte_seconds.labels(*self._labels)
        return self._first_byte

    def tokens(self, kind: str) -> Counts:
        found = self._tokens.get(kind)
        if found is None:
            found = self._tokens[kind] = self._metrics.tokens.labels(*self._labels, kind)
        return found


class Metrics:
    """Every metric of one app, in a registry of its own (tests build many apps).

    Its values are ``metric_values``' own, read when scraped. Under ``toolgate serve
    --workers N`` they are prometheus_client's, in the multiprocess directory, and
    ``exposition`` merges every worker's.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        make = Maker(self.registry, shared=multiprocess_dir() is not None)
        self._series: dict[tuple[str, str], RequestSeries] = {}
        self.requests = make.counter(
            "toolgate_requests",
            "Requests answered, by tenant, model and status class.",
            ["tenant", "model", "status"],
        )
        self.cancelled = make.counter(
            "toolgate_requests_cancelled",
            "Requests whose client left before the answer was done (logged as 499).",
            ["tenant"],
        )
        self.request_seconds = make.histogram(
            "toolgate_request_duration_seconds",
            "Time to answer a request, to its end.",
            ["tenant", "model"],
            LATENCY_BUCKETS,
        )
        self.first_byte_seconds = make.histogram(
            "toolgate_stream_first_byte_seconds",
            "Time to the first event of a stream.",
            ["tenant", "model"],
            LATENCY_BUCKETS,
        )
        self.in_flight = make.one_gauge(
            "toolgate_requests_in_flight",
            "Requests being answered now.",
            "livesum",
        )
        self.large_body_bytes = make.one_gauge(
            "toolgate_large_body_bytes_held",
            "Bytes of large request bodies held by requests being answered now.",
            "livesum",
        )
        self.upstream_calls = make.counter(
            "toolgate_upstream_calls",
            "Calls to upstream model servers, by status class.",
            ["upstream", "status"],
        )
        self.upstream_seconds = make.histogram(
            "toolgate_upstream_duration_seconds",
            "Time to an upstream's response headers.",
            ["upstream"],
            LATENCY_BUCKETS,
        )
        self.tool_calls = make.counter(
            "toolgate_tool_calls",
            "Tool calls, by tenant, tool, its source and outcome.",
            ["tenant", "tool", "source", "outcome"],
        )
        self.tool_searches = make.counter(
            "toolgate_tool_searches",
            "Searches of the tool catalog by a model (toolgate_search_tools), by "
            "tenant and whether they found a tool.",
            ["tenant", "found"],
        )
        self.tool_bytes_saved = make.counter(
            "toolgate_tool_search_bytes_saved",
            "Bytes of tool definitions not sent upstream because tool search chose "
            "the tools offered, by tenant (every tool in play less those offered).",
            ["tenant"],
        )
        self.embeddings = make.counter(
            "toolgate_tool_search_embeddings",
            "Calls of the embeddings model for tool search, by kind (query: a "
            "request's texts; catalog: a batch of tools; probe: toolgate check --probe) "
            "and outcome (ok, timeout, "
            "error: the request was searched by words alone).",
            ["kind", "outcome"],
        )
        self.embedded_tools = make.one_gauge(
            "toolgate_tool_search_embedded_tools",
            "Tools of the current catalog with a vector from the embeddings model (0: "
            "tool search ranks by words alone).",
            "mostrecent",
        )
        self.catalog_tools_left = make.one_gauge(
            "toolgate_tool_search_catalog_tools_left",
            "Tools of the catalog still waiting for a vector while it is embedded (0: done, "
            "or nothing to do).",
            "mostrecent",
        )
        self.embedding_seconds = make.histogram(
            "toolgate_tool_search_embedding_duration_seconds",
            "Time a call of the embeddings model for tool search took, by kind.",
            ["kind"],
            TOOL_BUCKETS,
        )
        self.tool_seconds = make.histogram(
            "toolgate_tool_duration_seconds",
            "Time a tool took to answer.",
            ["tool", "source"],
            TOOL_BUCKETS,
        )
        self.iterations = make.histogram(
            "toolgate_loop_iterations",
            "Upstream rounds per request with server tools.",
            ["tenant"],
            ITERATION_BUCKETS,
        )
        self.cap_hits = make.counter(
            "toolgate_cap_hits",
            "Requests that reached a cap, by kind.",
            ["tenant", "kind"],
        )
        self.tokens = make.counter(
            "toolgate_tokens",
            "Tokens used, summed over every round.",
            ["tenant", "model", "kind"],
        )
        self.spend = make.counter(
            "toolgate_spend_usd",
            "What requests cost in USD (model prices, tool costs), every round counted.",
            ["tenant", "model"],
        )
        self.budget_remaining = make.gauge(
            "toolgate_budget_remaining_usd",
            "What a tenant's cost budget has left in its window, as last seen.",
            ["tenant", "window"],
            "mostrecent",
        )
        self.rate_limited = make.counter(
            "toolgate_rate_limited",
            "Requests refused by a rate limit.",
            ["tenant", "kind"],
        )
        self.policy_verdicts = make.counter(
            "toolgate_policy_verdicts",
            "The policy point's verdicts on tool calls, by tenant, tool and verdict.",
            ["tenant", "tool", "verdict"],
        )
        self.guardrail_verdicts = make.counter(
            "toolgate_guardrail_verdicts",
            "Guardrail verdicts on tool results, final answers and input, by guardrail "
            "and what was done (block, redact, flag, taint; pass: nothing found; error: "
            "unscreened, its judge failed).",
            ["guardrail", "action"],
        )
        self.approvals_pending = make.one_gauge(
            "toolgate_approvals_pending",
            "Tool calls this process holds for an operator's approval now.",
            "livesum",
        )
        self.approval_seconds = make.histogram(
            "toolgate_approval_decision_seconds",
            "Time from asking for an approval to its answer, by who answered.",
            ["approver"],
            APPROVAL_BUCKETS,
        )
        self.store_errors = make.one_counter(
            "toolgate_store_errors",
            "Store calls that failed or were skipped while it was down.",
        )
        self.turn_misses = make.one_counter(
            "toolgate_saved_turn_misses",
            "Hidden tool turns gone when the client came back.",
        )
        self.config_reloads = make.counter(
            "toolgate_config_reloads",
            "Configuration reloads (SIGHUP, POST /admin/reload), by result.",
            ["result"],
        )
        self.cache_lookups = make.counter(
            "toolgate_tool_cache_lookups",
            "Tool-result cache lookups, by result.",
            ["result"],
        )

        self.otel_dropped_spans = make.counter(
            "toolgate_otel_dropped_spans",
            "Spans not exported: the export queue was full, or the collector "
            "refused them or could not be reached.",
            ["reason"],
            threads=True,  # the exporter counts its failures on its own thread
        )

    def series(self, tenant: str, model: str) -> RequestSeries:
        """The request metrics' series of ``tenant`` and ``model`` (bounded as the
        labels are: tenants and models come from the configuration)."""
        found = self._series.get((tenant, model))
        if found is None:
            found = self._series[tenant, model] = RequestSeries(self, tenant, model)
        return found

    def prime(self, labels: Labels) -> None:
        """Create every series the configuration allows, at zero, so dashboards and
        alerts see a series before its first event: the counters, the histograms of
        one label (per upstream, tool, tenant), and the request latency and time to
        first byte per tenant and model (the dashboard's latency panels; about
        seventeen series each per pair, bounded by the configuration)."""
        for upstream in labels.upstreams:
            self.upstream_seconds.labels(upstream)
            for status in UPSTREAM_STATUSES:
                self.upstream_calls.labels(upstream, status)
        # A catalog of thousands (tool search) is not primed tool by tool: its tools'
        # series appear at their first call, and priming stays quick and small.
        each_tool = len(labels.tools) <= PRIMED_TOOLS
        if each_tool:
            for tool, source in labels.tools.items():
                self.tool_seconds.labels(tool, source)
        for result in CACHE_RESULTS:
            self.cache_lookups.labels(result)
        for result in RELOAD_RESULTS:
            self.config_reloads.labels(result)
        for reason in SPAN_DROPS:
            self.otel_dropped_spans.labels(reason)
        for name, action in labels.guardrails:
            for done in (action, "pass", "error", "block"):
                self.guardrail_verdicts.labels(name, done)
        for approver in ("client", "operator"):
            self.approval_seconds.labels(approver)
        for kind in EMBEDDING_KINDS:  # tool search's embeddings model, if any
            self.embedding_seconds.labels(kind)
            for outcome in EMBEDDING_OUTCOMES:
                self.embeddings.labels(kind, outcome)
        self.requests.labels(NONE, NONE, "4xx")  # refused before a tenant is known
        for tenant, (models, tools) in labels.tenants.items():
            for model in models:
                for status in STATUS_CLASSES:
                    self.requests.labels(tenant, model, status)
                for kind in TOKEN_KINDS:
                    self.tokens.labels(tenant, model, kind)
                self.request_seconds.labels(tenant, model)
                self.first_byte_seconds.labels(tenant, model)
                self.spend.labels(tenant, model)
            for kind in RATE_KINDS:
                self.rate_limited.labels(tenant, kind)
            self.cancelled.labels(tenant)
            if tools:
                self.iterations.labels(tenant)
                for kind in labels.cap_kinds:
                    self.cap_hits.labels(tenant, kind)
                for found in ("true", "false"):
                    self.tool_searches.labels(tenant, found)
                self.tool_bytes_saved.labels(tenant)
            for tool in tools if each_tool else ():
                source = labels.tools.get(tool, NONE)
                for outcome in labels.outcomes:
                    self.tool_calls.labels(tenant, tool, source, outcome)
                for verdict in PRIMED_VERDICTS:
                    self.policy_verdicts.labels(tenant, tool, verdict)

    def exposition(self, accept: str | None = None) -> tuple[bytes, str]:
        """The exposition and its content type: the text format, or OpenMetrics when
        ``accept`` asks for it (as Prometheus does), which carries the latency
        histograms' exemplars (a traced request's trace id). Merged over every worker
        in multiprocess mode, where there are no exemplars."""
        encoder, content_type = choose_encoder(accept or "")
        directory = multiprocess_dir()
        if directory is None:
            return encoder(self.registry), content_type
        merged = CollectorRegistry()
        multiprocess.MultiProcessCollector(merged, path=directory)  # type: ignore[no-untyped-call]
        return encoder(merged), content_type
