"""Tool definitions as operators write them (frozen pydantic models)."""

from __future__ import annotations

import re
from typing import Any, Literal
from urllib.parse import urlsplit

import jmespath
import jmespath.exceptions
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .templates import placeholders

TOOL_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"
_TOOL_NAME = re.compile(TOOL_NAME_PATTERN)
_BIND_SOURCE = re.compile(r"^(tenant\.id|header\.[A-Za-z0-9!#$%&'*+.^_`|~-]+)$")

HttpMethod = Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
IDEMPOTENT_METHODS: frozenset[str] = frozenset({"GET", "HEAD", "PUT", "DELETE"})
BODY_METHODS: frozenset[str] = frozenset({"POST", "PUT", "PATCH"})


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
        return url

    @property
    def idempotent(self) -> bool:
        return self.method in IDEMPOTENT_METHODS

    def template_names(self) -> set[str]:
        """Every argument name the URL, query and header templates refer to."""
        names = set(placeholders(self.url))
        for template in (*self.query.values(), *self.headers.values()):
            names.update(placeholders(template))
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


class ToolSpec(_Frozen):
    """One HTTP tool: its name and schema as the model sees them, and how to call it."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    bind: dict[str, str] = Field(default_factory=dict)
    http: HttpSpec
    result: ResultSpec = Field(default_factory=ResultSpec)
    cache_ttl_s: float | None = Field(default=None, gt=0)  # GET tools: reuse results

    @field_validator("name")
    @classmethod
    def _valid_name(cls, name: str) -> str:
        if not _TOOL_NAME.match(name):
            raise ValueError(f"tool name {name!r} does not match {TOOL_NAME_PATTERN}")
        return name

    @field_validator("parameters")
    @classmethod
    def _valid_schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            where = "/".join(str(p) for p in exc.path) or "(root)"
            raise ValueError(f"invalid JSON Schema at {where}: {exc.message}") from exc
        if schema.get("type", "object") != "object":
            raise ValueError('the parameters schema must have "type": "object"')
        return schema

    @field_validator("bind")
    @classmethod
    def _valid_bind(cls, bind: dict[str, str]) -> dict[str, str]:
        for key, template in bind.items():
            for source in placeholders(template):
                if not _BIND_SOURCE.match(source):
                    raise ValueError(
                        f"bind.{key}: {{{source}}} is not a bindable value "
                        "(use {tenant.id} or {header.NAME})"
                    )
        return bind

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
