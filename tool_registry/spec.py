"""Tool definitions as operators write them (frozen pydantic models)."""

from __future__ import annotations

import re
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit

import httpx
import jmespath
import jmespath.exceptions
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .egress import is_loose_ipv4
from .schemas import schema_problem
from .templates import placeholders

TOOL_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"
_TOOL_NAME = re.compile(TOOL_NAME_PATTERN)
_BIND_SOURCE = re.compile(r"^(tenant\.id|user\.id|header\.[A-Za-z0-9!#$%&'*+.^_`|~-]+)$")

_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
_PLACEHOLDER_RE = re.compile(r"\{[^{}]+\}")
PUBLIC_HEADERS = frozenset(
    {"accept", "accept-encoding", "accept-language", "cache-control", "content-type", "user-agent"}
)
_HEADER_TEXT = re.compile(r"^[\x20-\x7e\t]*$")

HttpMethod = Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
IDEMPOTENT_METHODS: frozenset[str] = frozenset({"GET", "HEAD", "PUT", "DELETE"})
BODY_METHODS: frozenset[str] = frozenset({"POST", "PUT", "PATCH"})


def is_header_text(value: str) -> bool:
    """Printable ASCII, space and tab: what every HTTP stack sends as it is (no line
    breaks, no control characters, nothing an encoder could turn into something else)."""
    return _HEADER_TEXT.match(value) is not None


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class HttpSpec(_Frozen):
    """How a tool call becomes an HTTP request."""

    method: HttpMethod = "GET"
    url: str
    query: dict[str, str] = Field(default_factory=dict)
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(default=10.0, gt=0, le=3600)
    retries: int = Field(default=0, ge=0, le=5)
    follow_redirects: bool = False
    max_response_bytes: int = Field(default=1024 * 1024, gt=0)
    # The argument whose value is the whole JSON body (POST, PUT, PATCH); unset, the
    # arguments no template uses make the body's object.
    body: str | None = None
    # Calls carry the W3C ``traceparent`` of their span when the gateway traces; off
    # for a third party that should not see it.
    trace_context: bool = True

    @field_validator("method", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("url")
    @classmethod
    def _fixed_origin(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an absolute http:// or https:// URL")
        if "{" in parts.netloc or "}" in parts.netloc:
            raise ValueError("placeholders are allowed in the path and query only")
        if not url.isascii() or any(c.isspace() or ord(c) < 0x20 for c in url):
            raise ValueError("must be plain ASCII without spaces (percent-encode the rest)")
        try:
            host = httpx.URL(url).host
        except httpx.InvalidURL as exc:
            raise ValueError(f"cannot be parsed: {exc}") from exc
        if is_loose_ipv4(host):
            raise ValueError(f"host {host!r}: write an IPv4 address as a dotted quad")
        return url

    @field_validator("headers")
    @classmethod
    def _plain_header_values(cls, headers: dict[str, str]) -> dict[str, str]:
        lower = [name.lower() for name in headers]
        twice = sorted({name for name in lower if lower.count(name) > 1})
        if twice:
            raise ValueError(f"header {twice[0]!r} is given twice (names are case-insensitive)")
        for name, value in headers.items():
            if not _HEADER_NAME.match(name):
                raise ValueError(f"header name {name!r} is not a valid HTTP header name")
            if not is_header_text(value):
                raise ValueError(f"header {name}: only printable ASCII is allowed")
        return headers

    @model_validator(mode="after")
    def _body_methods(self) -> HttpSpec:
        if self.body is not None and self.method not in BODY_METHODS:
            raise ValueError("body is for POST, PUT and PATCH tools only")
        return self

    @property
    def idempotent(self) -> bool:
        return self.method in IDEMPOTENT_METHODS

    def secrets(self) -> list[str]:
        """The fixed texts of this request that may be credentials, for redaction:
        header values (but for a few descriptive headers), the URL's password and its
        query values, the query templates' fixed parts."""
        texts = [
            value for name, value in self.headers.items() if name.lower() not in PUBLIC_HEADERS
        ]
        parts = urlsplit(self.url)
        texts += [value for _, value in parse_qsl(parts.query, keep_blank_values=True)]
        texts += list(self.query.values())
        found = [parts.password] if parts.password else []
        for text in texts:
            for piece in _PLACEHOLDER_RE.split(text):
                piece = piece.strip()
                found.append(piece)
                scheme, _, token = piece.partition(" ")  # "Bearer <token>"
                if token and scheme.isalpha():
                    found.append(token.strip())
        return [text for text in found if text]

    def template_names(self) -> set[str]:
        """Every argument name the URL, query and header templates refer to."""
        names = set(placeholders(self.url))
        for template in (*self.query.values(), *self.headers.values()):
            names.update(placeholders(template))
        if self.body is not None:
            names.add(self.body)
        return names


class ResultSpec(_Frozen):
    """How a response body becomes the text the model reads."""

    pick: str | None = None
    max_chars: int = Field(default=16000, gt=0)

    @field_validator("pick")
    @classmethod
    def _valid_jmespath(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                jmespath.compile(value)
            except jmespath.exceptions.JMESPathError as exc:
                raise ValueError(f"invalid JMESPath expression: {exc}") from exc
        return value


class AuthSpec(_Frozen):
    """A tool that calls as the user: the connection whose grant its calls carry (the
    gateway's ``connections``), as ``Authorization: Bearer``."""

    connection: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")


class ToolSpec(_Frozen):
    """One HTTP tool: its name and schema as the model sees them, and how to call it."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    bind: dict[str, str] = Field(default_factory=dict)
    http: HttpSpec
    result: ResultSpec = Field(default_factory=ResultSpec)
    cache_ttl_s: float | None = Field(default=None, gt=0)  # GET tools: reuse results
    auth: AuthSpec | None = None  # calls carry the user's own token (docs/design.md §18)
    # The JSON Schema of what it answers: tool search brings it along for a tool that
    # needs one of its fields as an argument (docs/tools.md, "Tool search").
    returns: dict[str, Any] | None = None

    @field_validator("name")
    @classmethod
    def _valid_name(cls, name: str) -> str:
        if not _TOOL_NAME.match(name):
            raise ValueError(f"tool name {name!r} does not match {TOOL_NAME_PATTERN}")
        return name

    @field_validator("parameters")
    @classmethod
    def _valid_schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        problem = schema_problem(schema)
        if problem is not None:
            raise ValueError(problem)
        return schema

    @field_validator("bind")
    @classmethod
    def _valid_bind(cls, bind: dict[str, str]) -> dict[str, str]:
        for key, template in bind.items():
            for source in placeholders(template):
                if not _BIND_SOURCE.match(source):
                    raise ValueError(
                        f"bind.{key}: {{{source}}} is not a bindable value "
                        "(use {tenant.id}, {user.id} or {header.NAME})"
                    )
        return bind

    @model_validator(mode="after")
    def _a_user_s_token_goes_nowhere_else(self) -> ToolSpec:
        if self.auth is None:
            return self
        if self.http.follow_redirects:
            raise ValueError("auth: a tool that carries a user's token follows no redirect")
        if any(name.lower() == "authorization" for name in self.http.headers):
            raise ValueError("auth: the user's token is the Authorization header; drop yours")
        if self.cache_ttl_s is not None:
            raise ValueError("auth: one user's results are not kept for another (cache_ttl_s)")
        return self

    @model_validator(mode="after")
    def _cache_only_reads(self) -> ToolSpec:
        if self.cache_ttl_s is not None and self.http.method not in ("GET", "HEAD"):
            raise ValueError("cache_ttl_s is for GET and HEAD tools only")
        return self

    @model_validator(mode="after")
    def _templates_name_arguments(self) -> ToolSpec:
        known = set(self.parameters.get("properties", {})) | set(self.bind)
        unknown = sorted(self.http.template_names() - known)
        if unknown:
            raise ValueError(
                f"http templates refer to {', '.join(unknown)}, "
                "which are neither parameters nor bound values"
            )
        return self
