"""Prometheus metrics (docs/design.md §9). Labels stay small and bounded: tenant, model,
upstream and tool names come from the configuration, outcomes and status classes from
short fixed lists — never a request id, user text or argument."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Generic, TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    multiprocess,
)
from prometheus_client.exposition import choose_encoder

# LLM requests take from tens of milliseconds to minutes.
LATENCY_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)
TOOL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
ITERATION_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50)
EMBEDDING_KINDS = ("query", "catalog")
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


M = TypeVar("M", Counter, Histogram, Gauge)


class Family(Generic[M]):
    """A labelled metric whose children are kept by label values: ``labels`` is a dict
    lookup, where prometheus_client's normalises the values and takes a lock on every
    call (a tool round asks for about ten children). The label values are bounded as
    the module docstring says, so the dict is too."""

    __slots__ = ("_children", "metric")

    def __init__(self, metric: M) -> None:
        self.metric: M = metric
        self._children: dict[tuple[str, ...], M] = {}

    def labels(self, *values: str) -> M:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self.metric.labels(*values)
        return child


def status_class(status: int) -> str:
    return f"{status // 100}xx"


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


class Metrics:
    """Every metric of one app, in a registry of its own (tests build many apps).

    Under ``toolgate serve --workers N`` the values live in the multiprocess directory
    and ``exposition`` merges every worker's.
    """

    def __init__(self) -> None:
        registry = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Family(
            Counter(
                "toolgate_requests",
                "Requests answered, by tenant, model and status class.",
                ["tenant", "model", "status"],
                registry=registry,
            )
        )
        self.cancelled = Family(
            Counter(
                "toolgate_requests_cancelled",
                "Requests whose client left before the answer was done (logged as 499).",
                ["tenant"],
                registry=registry,
            )
        )
        self.request_seconds = Family(
            Histogram(
                "toolgate_request_duration_seconds",
                "Time to answer a request, to its end.",
                ["tenant", "model"],
                buckets=LATENCY_BUCKETS,
                registry=registry,
            )
        )
        self.first_byte_seconds = Family(
            Histogram(
                "toolgate_stream_first_byte_seconds",
                "Time to the first event of a stream.",
                ["tenant", "model"],
                buckets=LATENCY_BUCKETS,
                registry=registry,
            )
        )
        self.in_flight = Gauge(
            "toolgate_requests_in_flight",
            "Requests being answered now.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.large_body_bytes = Gauge(
            "toolgate_large_body_bytes_held",
            "Bytes of large request bodies held by requests being answered now.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.upstream_calls = Family(
            Counter(
                "toolgate_upstream_calls",
                "Calls to upstream model servers, by status class.",
                ["upstream", "status"],
                registry=registry,
            )
        )
        self.upstream_seconds = Family(
            Histogram(
                "toolgate_upstream_duration_seconds",
                "Time to an upstream's response headers.",
                ["upstream"],
                buckets=LATENCY_BUCKETS,
                registry=registry,
            )
        )
        self.tool_calls = Family(
            Counter(
                "toolgate_tool_calls",
                "Tool calls, by tenant, tool, its source and outcome.",
                ["tenant", "tool", "source", "outcome"],
                registry=registry,
            )
        )
        self.tool_searches = Family(
            Counter(
                "toolgate_tool_searches",
                "Searches of the tool catalog by a model (toolgate_search_tools), by "
                "tenant and whether they found a tool.",
                ["tenant", "found"],
                registry=registry,
            )
        )
        self.tool_bytes_saved = Family(
            Counter(
                "toolgate_tool_search_bytes_saved",
                "Bytes of tool definitions not sent upstream because tool search chose "
                "the tools offered, by tenant (every tool in play less those offered).",
                ["tenant"],
                registry=registry,
            )
        )
        self.embeddings = Family(
            Counter(
                "toolgate_tool_search_embeddings",
                "Calls of the embeddings model for tool search, by kind (query: a "
                "request's texts; catalog: a batch of tools) and outcome (ok, timeout, "
                "error: the request was searched by words alone).",
                ["kind", "outcome"],
                registry=registry,
            )
        )
        self.embedded_tools = Gauge(
            "toolgate_tool_search_embedded_tools",
            "Tools of the current catalog with a vector from the embeddings model (0: "
            "tool search ranks by words alone).",
            registry=registry,
            multiprocess_mode="mostrecent",
        )
        self.embedding_seconds = Family(
            Histogram(
                "toolgate_tool_search_embedding_duration_seconds",
                "Time a call of the embeddings model for tool search took, by kind.",
                ["kind"],
                buckets=TOOL_BUCKETS,
                registry=registry,
            )
        )
        self.tool_seconds = Family(
            Histogram(
                "toolgate_tool_duration_seconds",
                "Time a tool took to answer.",
                ["tool", "source"],
                buckets=TOOL_BUCKETS,
                registry=registry,
            )
        )
        self.iterations = Family(
            Histogram(
                "toolgate_loop_iterations",
                "Upstream rounds per request with server tools.",
                ["tenant"],
                buckets=ITERATION_BUCKETS,
                registry=registry,
            )
        )
        self.cap_hits = Family(
            Counter(
                "toolgate_cap_hits",
                "Requests that reached a cap, by kind.",
                ["tenant", "kind"],
                registry=registry,
            )
        )
        self.tokens = Family(
            Counter(
                "toolgate_tokens",
                "Tokens used, summed over every round.",
                ["tenant", "model", "kind"],
                registry=registry,
            )
        )
        self.spend = Family(
            Counter(
                "toolgate_spend_usd",
                "What requests cost in USD (model prices, tool costs), every round counted.",
                ["tenant", "model"],
                registry=registry,
            )
        )
        self.budget_remaining = Family(
            Gauge(
                "toolgate_budget_remaining_usd",
                "What a tenant's cost budget has left in its window, as last seen.",
                ["tenant", "window"],
                registry=registry,
                multiprocess_mode="mostrecent",
            )
        )
        self.rate_limited = Family(
            Counter(
                "toolgate_rate_limited",
                "Requests refused by a rate limit.",
                ["tenant", "kind"],
                registry=registry,
            )
        )
        self.policy_verdicts = Family(
            Counter(
                "toolgate_policy_verdicts",
                "The policy point's verdicts on tool calls, by tenant, tool and verdict.",
                ["tenant", "tool", "verdict"],
                registry=registry,
            )
        )
        self.guardrail_verdicts = Family(
            Counter(
                "toolgate_guardrail_verdicts",
                "Guardrail verdicts on tool results, final answers and input, by guardrail "
                "and what was done (block, redact, flag, taint; pass: nothing found; error: "
                "unscreened, its judge failed).",
                ["guardrail", "action"],
                registry=registry,
            )
        )
        self.approvals_pending = Gauge(
            "toolgate_approvals_pending",
            "Tool calls this process holds for an operator's approval now.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.approval_seconds = Family(
            Histogram(
                "toolgate_approval_decision_seconds",
                "Time from asking for an approval to its answer, by who answered.",
                ["approver"],
                buckets=APPROVAL_BUCKETS,
                registry=registry,
            )
        )
        self.store_errors = Counter(
            "toolgate_store_errors",
            "Store calls that failed or were skipped while it was down.",
            registry=registry,
        )
        self.turn_misses = Counter(
            "toolgate_saved_turn_misses",
            "Hidden tool turns gone when the client came back.",
            registry=registry,
        )
        self.config_reloads = Family(
            Counter(
                "toolgate_config_reloads",
                "Configuration reloads (SIGHUP, POST /admin/reload), by result.",
                ["result"],
                registry=registry,
            )
        )
        self.cache_lookups = Family(
            Counter(
                "toolgate_tool_cache_lookups",
                "Tool-result cache lookups, by result.",
                ["result"],
                registry=registry,
            )
        )

        self.otel_dropped_spans = Family(
            Counter(
                "toolgate_otel_dropped_spans",
                "Spans not exported: the export queue was full, or the collector "
                "refused them or could not be reached.",
                ["reason"],
                registry=registry,
            )
        )

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
