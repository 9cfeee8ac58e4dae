"""The gateway's configuration as frozen pydantic models (see docs/design.md §3)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import re2
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    field_validator,
    model_validator,
)

from gateway.config.console import ConsoleConfig as ConsoleConfig
from gateway.config.guardrails import Detector as Detector
from gateway.config.guardrails import GuardrailAction as GuardrailAction
from gateway.config.guardrails import GuardrailConfig as GuardrailConfig
from gateway.config.guardrails import GuardrailKind as GuardrailKind
from gateway.config.guardrails import GuardrailOn as GuardrailOn
from gateway.config.guardrails import GuardrailsConfig as GuardrailsConfig
from gateway.config.search import EmbeddingsConfig as EmbeddingsConfig
from gateway.config.search import SearchMode as SearchMode
from gateway.config.search import ToolSearchConfig as ToolSearchConfig
from gateway.config.users import AssertedUsersConfig as AssertedUsersConfig
from gateway.config.users import Connection
from gateway.config.users import GrantKey as GrantKey
from gateway.config.users import GrantsConfig as GrantsConfig
from gateway.config.users import JwtUsersConfig as JwtUsersConfig
from gateway.config.users import McpConnection as McpConnection
from gateway.config.users import OAuth2Connection as OAuth2Connection
from gateway.config.users import TokenExchangeConnection as TokenExchangeConnection
from gateway.config.users import UsersConfig as UsersConfig
from gateway.config.users import UserTokenAlgorithm as UserTokenAlgorithm
from gateway.config.webhook_keys import WEBHOOK_SECRET_PREFIX as WEBHOOK_SECRET_PREFIX
from gateway.config.webhook_keys import service_url, signing_secret
from gateway.config.webhook_keys import webhook_key as webhook_key
from tool_registry import (
    Effects,
    EgressPolicy,
    McpServerConfig,
    OpenApiSource,
    ToolSpec,
    Trust,
    linear_pattern,
)

OnLimit = Literal["final_answer", "error"]
OnStoreError = Literal["allow", "deny"]
# What becomes of a hosted tool type (web_search, file_search, ...) a client sends.
HostedTools = Literal["drop", "pass", "refuse"]
# Who must approve a tool's calls (docs/design.md §13), loosest first.
Approval = Literal["never", "after_untrusted", "always"]
# What a run that has read untrusted words does with a tool that writes, loosest first.
AfterUntrusted = Literal["allow", "approve", "refuse"]

# Whether a request's server tools are searched rather than all offered (docs/design.md §17).
# An OpenAPI document's or MCP server's tools, at most, by default where search may be
# on (256 where it is off): 4,096 tools weigh about 30 MiB with their index.
SEARCHED_MAX_TOOLS = 4096

_HEX_DIGEST = re.compile(r"^[0-9a-fA-F]{64}$")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ServerConfig(_Frozen):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    workers: int = Field(default=1, ge=1, le=64)
    # A worker's time to answer its supervisor's ping, starting too (docs/configuration.md)
    worker_healthcheck_s: int = Field(default=60, ge=1, le=3600)
    # At least OpenAI's own limit (25 MiB): an agent resends its whole session each turn.
    max_body_bytes: int = Field(default=32 * 1024 * 1024, gt=0)
    # A body past this is decoded off the event loop, and held against the next limit.
    large_body_bytes: int = Field(default=256 * 1024, gt=0)
    large_bodies_held_bytes: int = Field(default=128 * 1024 * 1024, gt=0)  # per process
    body_timeout_s: float = Field(default=30.0, gt=0)  # the whole request body, at most
    allow_open: bool = False
    stream_keepalive_s: float = Field(default=10.0, gt=0)  # SSE comments while tools run
    # Reload when the configuration file (or a file it takes in) changes, as a mounted
    # ConfigMap does: polled every watch_interval_s, applied as SIGHUP applies it.
    watch_config: bool = False
    watch_interval_s: float = Field(default=2.0, gt=0, le=3600)
    metrics_token: SecretStr | None = None  # bearer token /metrics asks for, if set
    # The gateway's address as users' browsers reach it: connections' callbacks and
    # links are made under it (docs/design.md §18).
    public_url: str | None = Field(default=None, pattern=r"^https?://[^\s?#]+$")
    admin_key: SecretStr | None = None  # bearer key of POST /admin/reload; unset: no route
    # Requests each operator key (admin or approvals) may make of the operator routes
    # (/v1/toolgate/approvals, tenants, tools, runs, overview, health, ...) a minute.
    operator_requests_per_minute: int = Field(default=600, ge=1, le=1_000_000)

    @field_validator("metrics_token", "admin_key", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        """``${VAR:-}`` of an unset variable: no key, not a key of no characters."""
        return None if value == "" else value

    @model_validator(mode="after")
    def _a_largest_body_fits(self) -> ServerConfig:
        if self.large_bodies_held_bytes < self.max_body_bytes:
            raise ValueError(
                "large_bodies_held_bytes must be at least max_body_bytes "
                "(else a body within the limit could never be taken)"
            )
        return self


class StoreConfig(_Frozen):
    url: str = "memory://"
    on_error: OnStoreError = "allow"
    prefix: str = "toolgate:"
    timeout_s: float = Field(default=0.1, gt=0, le=10)  # per store call
    keep_retry_s: float = Field(default=1.0, ge=0, le=60)  # a promised write (docs/state.md)
    turn_ttl_s: float = Field(default=3600, gt=0)  # saved client-tool turns
    memory_max_mb: int = Field(default=8, gt=0)  # memory:// holds at most this much

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, url: str) -> str:
        schemes = (
            "memory://",
            "redis://",
            "rediss://",
            "unix://",
            "redis+cluster://",
            "rediss+cluster://",
            "redis+sentinel://",
            "rediss+sentinel://",
        )
        if not url.startswith(schemes):
            raise ValueError(f"must start with one of {', '.join(schemes)}")
        return url


_BEDROCK_HOST = re.compile(r"^bedrock-runtime(?:-fips)?\.([a-z0-9-]+)\.amazonaws\.com(?::\d+)?$")

# The wire formats model servers speak (docs/design.md §20): chat completions, Anthropic
# Messages, Bedrock Converse.
Dialect = Literal["openai", "anthropic", "bedrock"]


class UpstreamConfig(_Frozen):
    name: str = Field(min_length=1)
    base_url: str
    dialect: Dialect = "openai"
    # Anthropic and Bedrock upstreams: mark the tools and the system prompt for the
    # model server's prompt cache (what every round of a run sends again, read at a
    # tenth of the price on later rounds).
    cache_prompt: bool = False
    # A bedrock upstream's AWS region (else read from its bedrock-runtime host).
    region: str | None = Field(default=None, pattern=r"^[a-z]{2}(-[a-z]+)+-\d+$")
    api_key: SecretStr | None = None
    sampling: bool = False  # it takes temperature and top_p (docs/anthropic.md)
    timeout_s: float = Field(default=120.0, gt=0)
    connect_timeout_s: float = Field(default=10.0, gt=0)
    max_retries: int = Field(default=2, ge=0, le=10)
    headers: dict[str, str] = Field(default_factory=dict)
    # The upstream serves POST /responses itself: requests with no server tools in
    # play pass through to it untouched; otherwise the gateway speaks chat to it.
    responses_api: bool = False
    # With tracing on, each request to it carries the W3C ``traceparent`` of its span.
    trace_context: bool = True

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return url.rstrip("/")

    @model_validator(mode="before")
    @classmethod
    def _bedrock_region(cls, data: Any) -> Any:
        """A bedrock upstream's region: given, or read from its bedrock-runtime host."""
        if not isinstance(data, dict) or data.get("dialect") != "bedrock" or data.get("region"):
            return data
        url = data.get("base_url")
        found = _BEDROCK_HOST.search(urlsplit(url).netloc) if isinstance(url, str) else None
        if found is None:
            raise ValueError(
                "a bedrock upstream needs its AWS region: set 'region', or a base_url on "
                "bedrock-runtime.<region>.amazonaws.com"
            )
        return {**data, "region": found.group(1)}

    @model_validator(mode="after")
    def _responses_on_chat_servers(self) -> UpstreamConfig:
        if self.responses_api and self.dialect != "openai":
            raise ValueError(
                f"responses_api is an OpenAI server's route: the {self.dialect!r} dialect "
                "has none (requests to Responses are translated to it instead)"
            )
        return self


MAX_TOKENS = 1_000_000_000  # more tokens than any request reads or writes

# A price no model charges: a typo (a price per token written per million) is refused.
MAX_PRICE_PER_MTOK = 10_000.0


class ModelPrice(_Frozen):
    """What a model costs, in USD per million tokens (docs/design.md §13). Input read from
    the cache, and input written to it (Anthropic's prompt caching), are priced as input
    unless each has its own price."""

    input_per_mtok: float = Field(ge=0, le=MAX_PRICE_PER_MTOK)
    output_per_mtok: float = Field(ge=0, le=MAX_PRICE_PER_MTOK)
    cached_input_per_mtok: float | None = Field(default=None, ge=0, le=MAX_PRICE_PER_MTOK)
    cache_write_per_mtok: float | None = Field(default=None, ge=0, le=MAX_PRICE_PER_MTOK)


class ModelConfig(_Frozen):
    name: str = Field(min_length=1)
    upstream: str
    upstream_model: str | None = None
    context_tokens: int | None = Field(default=None, gt=0)  # for truncation: "auto"
    price: ModelPrice | None = None  # unpriced: its rounds cost nothing in budgets
    # The most the gateway asks the model to write in one answer when a budget bounds
    # a round the client did not (``max_tokens``); unset: 4096, which every
    # OpenAI-compatible chat model accepts.
    max_output_tokens: int | None = Field(default=None, ge=16, le=MAX_TOKENS)

    @property
    def target(self) -> str:
        """The model name sent upstream."""
        return self.upstream_model or self.name


class LimitsConfig(_Frozen):
    max_iterations: int = Field(default=8, ge=1, le=100)
    max_tool_calls: int = Field(default=32, ge=0, le=1000)
    max_parallel_tools: int = Field(default=8, ge=1, le=100)
    request_timeout_s: float = Field(default=300.0, gt=0)
    on_limit: OnLimit = "final_answer"
    requests_per_minute: int | None = Field(default=None, ge=1)
    tokens_per_minute: int | None = Field(default=None, ge=1)
    # The per-run envelope (docs/design.md §13): every round of one request, hidden ones too.
    max_tokens_per_request: int | None = Field(default=None, ge=1, le=MAX_TOKENS)
    max_cost_usd_per_request: float | None = Field(default=None, gt=0)


class BudgetConfig(_Frozen):
    """A tenant's spend per window (UTC day, UTC month), shared by every replica:
    reserved before each round and each priced tool call, settled after."""

    tokens_per_day: int | None = Field(default=None, ge=1, le=1000 * MAX_TOKENS)
    cost_usd_per_day: float | None = Field(default=None, gt=0)
    cost_usd_per_month: float | None = Field(default=None, gt=0)


class ToolRule(_Frozen):
    """What a tool is and who approves its calls, for the tools it matches: ``tools``
    are globs on tool names, ``source`` a glob on the source's label (``http``,
    ``openapi:<spec>``, ``mcp:<server>``). Later rules win; a tenant's rules only
    tighten what the gateway's say."""

    tools: list[str] = Field(default_factory=lambda: ["*"], min_length=1)
    source: str = "*"
    effects: Effects | None = None
    output: Trust | None = None
    approval: Approval | None = None
    cost_usd: float | None = Field(default=None, ge=0, le=1000)  # per call, for budgets

    @model_validator(mode="after")
    def _says_something(self) -> ToolRule:
        said = (self.effects, self.output, self.approval, self.cost_usd)
        if all(value is None for value in said):
            raise ValueError("a rule sets at least one of effects, output, approval and cost_usd")
        return self


class OperatorKey(_Frozen):
    """An approver's key, and the name its sign-ins and decisions are shown under
    (without one: ``operator:`` and the first digits of the key's digest)."""

    key: SecretStr
    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._@+-]{0,63}$")

    @field_validator("name")
    @classmethod
    def _not_the_admin(cls, name: str | None) -> str | None:
        if name is not None and name.strip().lower() == "admin":
            raise ValueError("'admin' is server.admin_key's name: give this key another")
        return name


class ApprovalsConfig(_Frozen):
    """How a call that needs approval gets one (docs/design.md §13)."""

    # Without a client that approves (chat without a toolgate_approval tool), an
    # operator decides at /v1/toolgate/approvals while the run waits; off: refused.
    operator: bool = False
    timeout_s: float = Field(default=300.0, gt=0, le=86400)  # an operator's wait, at most
    ttl_s: float = Field(default=3600.0, gt=0, le=7 * 86400)  # a client's answer, at most
    webhook: str | None = None  # called (POST, JSON) when an operator approval is pending
    # Signs each delivery as Standard Webhooks does (``gateway/ops/webhook.py``).
    webhook_secret: SecretStr | None = None
    # Keys that list and decide them: each a key, or ``{name, key}``.
    admin_keys: list[OperatorKey] = Field(default_factory=list)

    _webhook_url = field_validator("webhook")(service_url)

    @field_validator("admin_keys", mode="before")
    @classmethod
    def _keys_or_named(cls, keys: object) -> object:
        if not isinstance(keys, list):
            return keys
        return [{"key": key} if isinstance(key, str | SecretStr) else key for key in keys]

    _webhook_secret = field_validator("webhook_secret")(signing_secret)

    @model_validator(mode="after")
    def _secret_signs_a_webhook(self) -> ApprovalsConfig:
        if self.webhook_secret is not None and self.webhook is None:
            raise ValueError("webhook_secret signs the webhook: set approvals.webhook too")
        return self


class PolicyConfig(_Frozen):
    """The gateway's tool policy (top-level ``policy``): rules for tools, and what
    every tenant starts from."""

    tools: list[ToolRule] = Field(default_factory=list)
    input: Trust = "trusted"  # a request's own input, unless it says otherwise
    after_untrusted: AfterUntrusted = "allow"
    approvals: ApprovalsConfig = Field(default_factory=ApprovalsConfig)
    guardrails: GuardrailsConfig = Field(default_factory=GuardrailsConfig)  # docs/guardrails.md


class TenantPolicyConfig(_Frozen):
    """A tenant's own policy: it may tighten the gateway's, never loosen it."""

    tools: list[ToolRule] = Field(default_factory=list)
    input: Trust | None = None
    after_untrusted: AfterUntrusted | None = None
    approvals: ApprovalsConfig | None = None  # in place of the gateway's
    # Added to the gateway's; its stream settings, where it sets them, in their place.
    guardrails: GuardrailsConfig | None = None


class BackgroundRule(_Frozen):
    """Requests a chat front-end sends in the background (a title, tags, follow-up
    questions) that get none of the tenant's server tools: those whose last user
    message matches ``message`` (an RE2 pattern, searched in its first 4,096
    characters), or that carry the header ``header`` with a value matching the glob
    ``value``."""

    message: str | None = None
    header: str | None = None
    value: str = "*"

    @model_validator(mode="after")
    def _one_kind(self) -> BackgroundRule:
        if (self.message is None) == (self.header is None):
            raise ValueError("a rule names either a message pattern or a header")
        if self.message is not None:
            try:
                linear_pattern(self.message)
            except re2.error as exc:
                raise ValueError("message: not a pattern RE2 can run") from exc
        return self


class TenantConfig(_Frozen):
    id: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    keys: list[SecretStr] = Field(default_factory=list)
    key_sha256: list[str] = Field(default_factory=list)
    models: list[str] = Field(default_factory=lambda: ["*"])
    tools: list[str] = Field(default_factory=list)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    hosted_tools: HostedTools = "drop"
    policy: TenantPolicyConfig = Field(default_factory=TenantPolicyConfig)
    budget: BudgetConfig | None = None
    record: Record | None = None  # in place of recordings.record
    background: list[BackgroundRule] = Field(default_factory=list)  # no server tools
    tool_search: ToolSearchConfig | None = None  # its fields in place of the gateway's
    users: UsersConfig | None = None  # verified end users (docs/design.md §18)

    @field_validator("tool_search")
    @classmethod
    def _no_embeddings_of_its_own(cls, search: ToolSearchConfig | None) -> ToolSearchConfig | None:
        if search is not None and search.embeddings is not None:
            raise ValueError(
                "embeddings: the catalog's vectors are the gateway's (one index per "
                "snapshot): set tool_search.embeddings at the top level"
            )
        return search

    @field_validator("keys")
    @classmethod
    def _non_empty_keys(cls, keys: list[SecretStr]) -> list[SecretStr]:
        for index, key in enumerate(keys):
            if not key.get_secret_value():
                raise ValueError(f"key {index} is empty")
        return keys

    @field_validator("key_sha256")
    @classmethod
    def _hex_digests(cls, digests: list[str]) -> list[str]:
        for index, digest in enumerate(digests):
            if not _HEX_DIGEST.match(digest):
                raise ValueError(f"key_sha256[{index}] is not 64 hexadecimal characters")
        return [d.lower() for d in digests]


class EgressConfig(_Frozen):
    deny_private: bool = False
    allow_hosts: list[str] = Field(default_factory=list)

    def policy(self) -> EgressPolicy:
        """The guard these settings make: the gateway, its CLI and replay all use this."""
        return EgressPolicy(
            deny_private=self.deny_private,
            allow_hosts=frozenset(h.lower() for h in self.allow_hosts),
        )


# Which requests are recorded for replay (docs/design.md §14; issue 26): none, those that
# failed or hit a cap, every one, or a share of them (0.0 to 1.0).
Record = Literal["off", "errors", "all"] | Annotated[float, Field(ge=0, le=1)]


class IdempotencyConfig(_Frozen):
    """Writes run exactly once (docs/design.md §16): how long a request's write results are
    kept for its retries — under an ``Idempotency-Key``, and under the stock SDKs' own
    retries (``x-stainless-retry-count``, the same body)."""

    enabled: bool = True
    ttl_s: float = Field(default=86400.0, gt=0, le=30 * 86400)  # an Idempotency-Key's
    sdk_retry_ttl_s: float = Field(default=600.0, gt=0, le=86400)  # an SDK retry's


class RecordingsConfig(_Frozen):
    """Recordings of requests' trajectories, kept with their traces for replay."""

    record: Record = "off"  # every tenant's, unless it says otherwise
    ttl_s: float = Field(default=7 * 24 * 3600, gt=0)
    max_bytes: int = Field(default=1024 * 1024, gt=0)  # a larger recording is not kept


class TracesConfig(_Frozen):
    enabled: bool = True
    ttl_s: float = Field(default=3600, gt=0)
    result_chars: int = Field(default=2000, ge=0)  # of each tool result kept


OtlpProtocol = Literal["http/protobuf", "grpc"]


class OtelConfig(_Frozen):
    """OpenTelemetry tracing (docs/design.md §14). A field left unset takes the standard
    ``OTEL_*`` environment variable, then the SDK's default; ``enabled`` unset means
    on when an OTLP endpoint is configured either way."""

    enabled: bool | None = None
    endpoint: str | None = None  # the collector's OTLP base URL (/v1/traces is added)
    protocol: OtlpProtocol | None = None  # grpc needs the ``toolgate[otlp-grpc]`` extra
    headers: dict[str, str] = Field(default_factory=dict)  # sent to the collector: secrets
    service_name: str | None = None
    sample_ratio: float | None = Field(default=None, ge=0, le=1)  # of traces a client did not start
    timeout_s: float | None = Field(default=None, gt=0, le=60)  # one export, at most
    max_queue_size: int | None = Field(default=None, ge=1, le=1_000_000)  # spans awaiting export
    # Message contents, tool arguments and results go on spans only when this is on
    # (redacted, and each cut to ``content_chars``).
    capture_content: bool = False
    content_chars: int = Field(default=4096, ge=0, le=1_000_000)

    @field_validator("endpoint")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return url


class ResponsesConfig(_Frozen):
    ttl_s: float = Field(default=7 * 24 * 3600, gt=0)  # stored responses live this long


class GatewayConfig(_Frozen):
    """The whole configuration. ``tools`` holds inline tools and those of ``tool_files``."""

    server: ServerConfig = Field(default_factory=ServerConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    upstreams: list[UpstreamConfig] = Field(min_length=1)
    models: list[ModelConfig] = Field(min_length=1)
    tools: list[ToolSpec] = Field(default_factory=list)
    tool_files: list[str] = Field(default_factory=list)
    openapi: list[OpenApiSource] = Field(default_factory=list)
    mcp: list[McpServerConfig] = Field(default_factory=list)
    egress: EgressConfig = Field(default_factory=EgressConfig)
    traces: TracesConfig = Field(default_factory=TracesConfig)
    recordings: RecordingsConfig = Field(default_factory=RecordingsConfig)
    idempotency: IdempotencyConfig = Field(default_factory=IdempotencyConfig)
    otel: OtelConfig = Field(default_factory=OtelConfig)
    responses: ResponsesConfig = Field(default_factory=ResponsesConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    tool_search: ToolSearchConfig = Field(default_factory=ToolSearchConfig)
    grants: GrantsConfig | None = None  # where users' tokens are kept (docs/design.md §18)
    connections: list[Connection] = Field(default_factory=list)  # users' services
    tenants: list[TenantConfig] | None = None
    console: ConsoleConfig = Field(default_factory=ConsoleConfig)
    # Where each of ``tools`` was defined (the loader sets it: tool files are merged in).
    _tool_origins: list[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="after")
    def _embeddings_have_an_upstream(self) -> GatewayConfig:
        if self.embedding_upstream is None and self.tool_search.embeddings is not None:
            named = self.tool_search.embeddings.upstream
            raise ValueError(
                f"tool_search.embeddings.upstream: no openai upstream named {named!r}"
                if named
                else "tool_search.embeddings: no upstream of the openai dialect to ask"
            )
        return self

    @model_validator(mode="after")
    def _judges_are_models(self) -> GatewayConfig:
        names = {model.name for model in self.models}
        rules = list(self.policy.guardrails.rules)
        for tenant in self.tenants or []:
            rules += tenant.policy.guardrails.rules if tenant.policy.guardrails else []
        for rule in rules:
            if rule.model is not None and rule.model not in names:
                raise ValueError(
                    f"guardrail {rule.name!r}: its judge {rule.model!r} is not a configured model"
                )
        return self

    @property
    def embedding_upstream(self) -> UpstreamConfig | None:
        """The upstream tool search asks for embeddings (``/v1/embeddings``), if any."""
        settings = self.tool_search.embeddings
        if settings is None:
            return None
        for upstream in self.upstreams:
            if upstream.dialect == "openai" and settings.upstream in (None, upstream.name):
                return upstream
        return None

    @model_validator(mode="after")
    def _connections_have_what_they_need(self) -> GatewayConfig:
        names = [c.name for c in self.connections]
        if len(set(names)) != len(names):
            raise ValueError("connections: two have the same name")
        if self.connections and self.grants is None:
            raise ValueError("connections need a grants section: where users' tokens are kept")
        named = {t.auth.connection for t in self.tools if t.auth is not None}
        named |= {s.connection for s in self.openapi if s.connection is not None}
        named |= {m.auth.connection for m in self.mcp if m.auth is not None}
        unknown = sorted(named - set(names))
        if unknown:
            raise ValueError(f"tools name connections that are not configured: {unknown}")
        if self.connections and self.server.public_url is None:
            raise ValueError(
                "connections need server.public_url: the address users' browsers reach "
                "the gateway at (the providers' callback is under it)"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _searched_catalogs(cls, data: object) -> object:
        """Where tool search may be on (``tool_search.mode`` not ``off``), an OpenAPI
        document or an MCP server gives up to ``SEARCHED_MAX_TOOLS`` tools unless its
        ``max_tools`` says otherwise: a request is sent the few that fit, not all."""
        if not isinstance(data, dict):
            return data
        search = data.get("tool_search")
        if isinstance(search, dict) and search.get("mode") == "off":
            return data
        widened = dict(data)
        for key in ("openapi", "mcp"):
            entries = data.get(key)
            if isinstance(entries, list):
                widened[key] = [
                    {"max_tools": SEARCHED_MAX_TOOLS, **entry} if isinstance(entry, dict) else entry
                    for entry in entries
                ]
        return widened

    def tool_origin(self, index: int) -> str:
        if index < len(self._tool_origins):
            return self._tool_origins[index]
        return f"tools[{index}]"

    @property
    def open_mode(self) -> bool:
        """No ``tenants`` section: one tenant, every tool and model, no key check."""
        return self.tenants is None
