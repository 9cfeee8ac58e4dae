"""What a tool is, whatever its source: a definition for the model, a way to prepare a
call (arguments parsed, bound and validated) and a way to execute it (docs/design.md §12).

Sources produce tools: ``HttpTool`` for inline tools, tool files and OpenAPI
operations; ``mcp_source.McpTool`` for the tools of MCP servers. The gateway only ever
asks a tool what this base class answers, never how it is carried out.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from .arguments import ArgumentValidator, canonical_arguments, parse_arguments, visible_parameters
from .definition import ToolDefinition
from .errors import MissingValue, ToolArgumentsInvalid
from .jsonio import canonical
from .request_builder import RequestTemplate
from .schemas import schema_problem
from .templates import placeholders, render
from .value_type import immutable

if TYPE_CHECKING:
    from .redact import Redactor
    from .results import ToolResult
    from .spec import ToolSpec

SAFE_METHODS = frozenset({"GET", "HEAD"})  # methods that change nothing

Effects = Literal["read", "write"]  # whether a call may change the world
Trust = Literal["trusted", "untrusted"]  # whether its output may carry someone else's words


def definition_fingerprint(definition: Mapping[str, Any]) -> str:
    """What a tool looked like to the model: the SHA-256 of its canonical definition
    (recordings keep it; a replay compares it with the live tool's)."""
    return "sha256:" + hashlib.sha256(canonical(definition).encode()).hexdigest()


@immutable
class CallContext:
    """What the gateway knows about the request a call belongs to, for ``bind``."""

    tenant_id: str
    headers: Mapping[str, str] = field(default_factory=dict)  # lower-case names
    user_id: str | None = None  # the verified end user's, when the tenant verifies them

    def values(self, names: Iterable[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        for name in names:
            if name == "tenant.id":
                found[name] = self.tenant_id
            elif name == "user.id":
                if self.user_id is not None:
                    found[name] = self.user_id
            elif name.startswith("header."):
                value = self.headers.get(name[len("header.") :].lower())
                if value is not None:
                    found[name] = value
        return found


@immutable
class PreparedCall:
    """A call whose arguments are parsed, validated and bound: ready to execute."""

    tool: Tool
    arguments: dict[str, Any]
    # W3C trace headers (``traceparent``) naming the caller's span for this call; sent
    # unless the tool's source turns ``trace_context`` off. Not part of the call's key.
    trace: Mapping[str, str] | None = None
    # The user's token, for a tool that calls as the user (``connection``): sent as
    # ``Authorization: Bearer`` to the tool's own origin only, and cut from its result.
    bearer: str | None = field(default=None, repr=False)

    @property
    def key(self) -> str:
        """Identifies the same call made twice: the name and canonical arguments."""
        return f"{self.tool.name}:{canonical_arguments(self.arguments)}"


class HttpRunner(Protocol):
    """Makes HTTP tool calls: the executor's transport, egress guard and retries; its
    ``redactor`` is what every source cuts results with."""

    @property
    def redactor(self) -> Redactor: ...

    async def run_http(
        self, tool: HttpTool, call: PreparedCall, deadline: float | None
    ) -> ToolResult: ...


class Tool(ABC):
    """A tool ready for use. ``source`` is its kind (``http``, ``openapi``, ``mcp``), as
    metrics label it; ``label`` names its source for policy rules (``http``,
    ``openapi:<spec>``, ``mcp:<server>``); ``origin`` says where it was defined, for
    operators' messages."""

    __slots__ = (
        "_bound",
        "_bound_lower",
        "_problem",
        "_validator",
        "bind",
        "bind_sources",
        "definition",
        "description",
        "feeds",
        "fingerprint",
        "label",
        "name",
        "origin",
        "parameters",
        "returns",
        "source",
    )

    def __init__(
        self,
        name: str,
        description: str,
        parameters: dict[str, Any],
        *,
        source: str,
        origin: str,
        label: str | None = None,
        bind: Mapping[str, str] | None = None,
        returns: Mapping[str, Any] | None = None,
        feeds: tuple[str, ...] = (),
    ) -> None:
        """``returns``: the JSON Schema of what the tool answers, where its source says
        (an MCP output schema, an OpenAPI response body); ``feeds``: the tools whose
        arguments its answer supplies, where its source says (OpenAPI links). Tool
        search reads both to bring a tool's producers along (``producers.py``)."""
        self.name = name
        self.returns = returns if isinstance(returns, Mapping) else None
        self.feeds = feeds
        self.label = label or source
        self.description = description
        self.parameters = parameters
        self.source = source
        self.origin = origin
        self.bind: dict[str, str] = dict(bind or {})
        self._validator = ArgumentValidator(parameters)
        self._problem: str | bool | None = False  # worked out when first asked
        self.bind_sources = {key: placeholders(t) for key, t in self.bind.items()}
        self._bound = frozenset(self.bind)
        self._bound_lower = frozenset(key.lower() for key in self.bind)
        self.definition = ToolDefinition(
            name, description or None, visible_parameters(parameters, set(self.bind))
        )
        # What the tool's results depend on, beside its arguments: a result cached for
        # one definition is never served for another of the same name (after a reload).
        self.fingerprint = f"{source}:{name}"

    @property
    def schema_problem(self) -> str | None:
        """Why its argument schema cannot be used (``schemas.schema_problem``), or None;
        judged once per tool, however many snapshots it is in."""
        if self._problem is False:
            self._problem = schema_problem(self.parameters)
        return self._problem if isinstance(self._problem, str) else None

    # What the gateway asks of a tool, whatever its source.

    @property
    @abstractmethod
    def effects(self) -> Effects:
        """What its source says a call does: ``read`` changes nothing, ``write`` may
        (docs/design.md §13; the gateway's policy rules may say otherwise)."""

    @property
    def output(self) -> Trust:
        """Whether its source says its results may carry words from outside (a web
        page, an email): ``untrusted``. Most of an operator's own APIs are ``trusted``."""
        return "trusted"

    @property
    def side_effects(self) -> bool:
        """Whether calling it may change something (a replayed request must not)."""
        return self.effects == "write"

    @property
    def cache_ttl_s(self) -> float | None:
        """How long a successful result may be reused, if at all."""
        return None

    @property
    def connection(self) -> str | None:
        """The connection whose user's token its calls carry, if it calls as the user."""
        return None

    @property
    def header_bound(self) -> frozenset[str]:
        """Arguments whose values come from request headers: never shown in traces."""
        return frozenset(k for k, t in self.bind.items() if "{header." in t)

    def prepare(self, raw_arguments: str | None, context: CallContext) -> PreparedCall:
        """Parse, bind and validate the model's arguments; raise ``ToolArgumentsInvalid``."""
        arguments = parse_arguments(raw_arguments)
        if self._bound:
            # Bound values win over anything the model sends, under any letter case
            # (``USER`` beside a bound ``user`` would reach the tool as a second value).
            bound = self._bound_lower
            arguments = {k: v for k, v in arguments.items() if k.lower() not in bound}
        for key, template in self.bind.items():
            values = context.values(self.bind_sources[key])
            try:
                arguments[key] = render(template, values)
            except MissingValue as exc:
                if not exc.name.startswith("header."):
                    raise ToolArgumentsInvalid(
                        "this tool acts for a verified user, and the request named none"
                    ) from exc
                raise ToolArgumentsInvalid(
                    f"this tool needs the request header {exc.name[len('header.') :]!r}, "
                    "which the client did not send"
                ) from exc
        return PreparedCall(self, self._validator.validate(arguments, self._bound))

    @abstractmethod
    async def run(self, call: PreparedCall, deadline: float | None, http: HttpRunner) -> ToolResult:
        """Execute a prepared call. Trouble on the far side is an error result, never an
        exception; reaching the caller's ``deadline`` raises ``TimeoutError``."""


class HttpTool(Tool):
    """A tool that is one HTTP request: inline and file tools, OpenAPI operations."""

    __slots__ = ("request", "spec")

    def __init__(
        self,
        spec: ToolSpec,
        *,
        source: str = "http",
        origin: str = "",
        label: str | None = None,
        feeds: tuple[str, ...] = (),
    ) -> None:
        super().__init__(
            spec.name,
            spec.description,
            spec.parameters,
            source=source,
            origin=origin or f"tool {spec.name!r}",
            label=label,
            bind=spec.bind,
            returns=spec.returns,
            feeds=feeds,
        )
        self.spec = spec
        self._problem = None  # a ToolSpec's parameters passed ``schema_problem`` already
        self.request = RequestTemplate(spec.http)
        # Headers left out: a rotated credential does not change what the tool answers;
        # nor does the schema it says it answers in.
        shape = spec.model_dump_json(exclude={"http": {"headers"}, "returns": True})
        self.fingerprint = hashlib.sha256(shape.encode()).hexdigest()[:16]

    @property
    def effects(self) -> Effects:
        return "read" if self.spec.http.method in SAFE_METHODS else "write"

    @property
    def cache_ttl_s(self) -> float | None:
        return self.spec.cache_ttl_s

    @property
    def connection(self) -> str | None:
        return self.spec.auth.connection if self.spec.auth is not None else None

    async def run(self, call: PreparedCall, deadline: float | None, http: HttpRunner) -> ToolResult:
        return await http.run_http(self, call, deadline)
