"""The OpenAPI source: every selected operation of an OpenAPI 3.0 or 3.1 document
becomes an HTTP tool (docs/design.md §3, §12).

- Name: ``operationId`` (else method and path) with the source's ``prefix``, made
  valid and shortened by ``tool_name``.
- Arguments: path, query and header parameters and a JSON request body make one
  schema. An object body's properties sit beside the parameters when no name clashes;
  any other body is the argument ``body``.
- Destination: the source's ``base_url``, else the operation's or document's first
  ``servers`` entry (variables at their defaults; a relative one against the
  document's URL). The source is pinned to one origin — ``base_url``'s, else the
  document's own server's: an operation whose server or path would reach another
  (``@host`` in a path, a server elsewhere) is left out, so a document can never send
  the configured credentials anywhere else.
- Security: the first requirement whose schemes all have a configured secret in
  ``auth`` is filled from it (a header, query value or cookie). The model never sees
  or sets these: configured headers and auth win over a document's parameters of the
  same name in any letter case, and such a parameter is left out of the schema.
- Bounds: inlining references is budgeted (``openapi_schema``), and at most
  ``max_tools`` operations become tools.

Operations that cannot be a tool (no JSON body type, cookie parameters the source
cannot fill, an unusable path) are left out and named in ``OpenApiTools.skipped``.
"""

from __future__ import annotations

import base64
import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urljoin

import httpx
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

from tool_registry.errors import ExpansionError, OperationLeftOut, RefError, ToolConfigError
from tool_registry.redact import display_url
from tool_registry.registry import tool_name
from tool_registry.spec import BODY_METHODS, ResultSpec, ToolSpec, is_header_text
from tool_registry.tool import HttpTool

from .openapi_answers import answer_fields, linked
from .openapi_schema import SchemaResolver
from .yaml import describe_validation_error

METHODS = ("get", "put", "post", "delete", "patch", "head")
# Headers a document's parameter never sets: OpenAPI's own three, and those that frame
# the request or carry credentials.
_IGNORED_HEADERS = frozenset(
    {
        "accept",
        "content-type",
        "authorization",
        "cookie",
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "proxy-authorization",
    }
)
_MAX_DESCRIPTION = 1024


class OpenApiSource(BaseModel):
    """One ``openapi:`` entry of the configuration."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    spec: str = Field(min_length=1)  # a file (relative to the config file) or http(s) URL
    base_url: str | None = None
    prefix: str = ""
    include: list[str] = Field(default_factory=list)  # globs; empty: every operation
    exclude: list[str] = Field(default_factory=list)
    auth: dict[str, SecretStr] = Field(default_factory=dict)  # security scheme → secret
    headers: dict[str, str] = Field(default_factory=dict)  # sent with every call
    timeout_s: float = Field(default=10.0, gt=0, le=3600)
    retries: int = Field(default=0, ge=0, le=5)
    result: ResultSpec = Field(default_factory=ResultSpec)
    # At most this many operations become tools: a document is not ours to trust, and
    # every tool is a metric series and part of every model request.
    max_tools: int = Field(default=256, gt=0, le=10000)
    trace_context: bool = True  # calls carry the W3C traceparent of their span
    # Its operations call as the user, with their grant of this connection (the
    # gateway's ``connections``) as ``Authorization: Bearer``.
    connection: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]{1,64}$")

    @model_validator(mode="after")
    def _one_authorization(self) -> OpenApiSource:
        if self.connection is not None and any(
            name.lower() == "authorization" for name in self.headers
        ):
            raise ValueError("connection: the user's token is the Authorization header")
        return self

    @property
    def is_url(self) -> bool:
        return self.spec.startswith(("http://", "https://"))

    @property
    def label(self) -> str:
        """How the source is shown everywhere (its tools' source label, messages, logs,
        the console): its document, with a URL's userinfo and query values redacted."""
        return display_url(self.spec)


@dataclass
class OpenApiTools:
    """What one document gave: its tools and the operations left out, with why."""

    tools: list[HttpTool] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def openapi_tools(document: Any, source: OpenApiSource, where: str) -> OpenApiTools:
    """The tools of a parsed document; ``where`` names it in messages (a path or URL).
    Raises ``ToolConfigError`` when the document as a whole cannot be used."""
    try:
        return _tools(document, source, where)
    except RecursionError as exc:
        raise ToolConfigError(f"{where}: the document nests too deep") from exc
    except (AttributeError, LookupError, TypeError, ValueError) as exc:
        # A value of another type than OpenAPI gives it (a list for 'components', a
        # number for 'parameters'): the document as a whole cannot be used.
        raise ToolConfigError(
            f"{where}: not a usable OpenAPI document ({type(exc).__name__} reading it)"
        ) from exc


def _tools(document: Any, source: OpenApiSource, where: str) -> OpenApiTools:
    if not isinstance(document, dict):
        raise ToolConfigError(f"{where}: not an OpenAPI document (expected a mapping)")
    version = str(document.get("openapi", ""))
    if not version.startswith(("3.0", "3.1")):
        found = f"swagger {document['swagger']}" if "swagger" in document else repr(version)
        raise ToolConfigError(f"{where}: OpenAPI 3.0 or 3.1 is supported, this is {found}")
    resolver = SchemaResolver(document, oas30=version.startswith("3.0"))
    paths = document.get("paths")
    if not isinstance(paths, dict):
        raise ToolConfigError(f"{where}: the document has no 'paths'")
    found_tools = OpenApiTools()
    matched: set[str] = set()
    pinned = _pinned_origin(document, source)
    over = 0  # operations past max_tools
    for path, item in paths.items():
        try:
            item = resolver.follow(item)
        except RefError as exc:
            found_tools.skipped.append(f"{path}: {exc}")
            continue
        if not isinstance(item, dict):
            continue
        for method in METHODS:
            operation = item.get(method)
            if not isinstance(operation, dict):
                continue
            label = f"{method.upper()} {path}"
            selectors = [label, operation.get("operationId") or ""]
            name = tool_name(
                source.prefix, operation.get("operationId") or _path_name(method, path)
            )
            selectors.append(name)
            include = _matches(source.include, selectors, matched) if source.include else True
            if not include or _matches(source.exclude, selectors, set()):
                continue
            if len(found_tools.tools) >= source.max_tools:
                over += 1
                continue
            resolver.begin_operation()
            try:
                spec = _operation_spec(
                    document=document,
                    resolver=resolver,
                    source=source,
                    where=where,
                    path=path,
                    item=item,
                    method=method,
                    operation=operation,
                    name=name,
                )
                _check_origin(spec.http.url, pinned)
            except (OperationLeftOut, ExpansionError) as exc:
                found_tools.skipped.append(f"{label}: {exc}")
                continue
            found_tools.tools.append(
                HttpTool(
                    spec,
                    source="openapi",
                    origin=f"{where}: {label}",
                    label=f"openapi:{source.label}",
                    feeds=linked(resolver, operation, source.prefix),
                )
            )
    if over:
        found_tools.skipped.append(
            f"{over} more operations: the source gives at most {source.max_tools} tools (max_tools)"
        )
    unmatched = [p for p in source.include if p not in matched]
    if unmatched:
        patterns = ", ".join(map(repr, unmatched))
        raise ToolConfigError(f"{where}: include {patterns} matches no operation")
    return found_tools


def _origin(url: str) -> tuple[str, str, int | None] | None:
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        return None
    if parsed.userinfo or parsed.scheme not in ("http", "https"):
        return None
    return parsed.scheme, parsed.host, parsed.port


def _pinned_origin(document: dict[str, Any], source: OpenApiSource) -> Any:
    """The one origin this source's operations may reach: ``base_url``'s, else the
    document's own first server's; None when neither names one."""
    if source.base_url:
        return _origin(source.base_url)
    servers = document.get("servers")
    if isinstance(servers, list) and servers and isinstance(servers[0], dict):
        url = _server_url(servers[0])
        if source.is_url:
            url = urljoin(source.spec, url)
        return _origin(url)
    return None


def _check_origin(url: str, pinned: Any) -> None:
    """An operation's URL must be on the source's pinned origin, with nothing before
    its host: a path or server that would lead elsewhere leaves the operation out."""
    found = _origin(url)
    if found is None or pinned is None or found != pinned:
        raise OperationLeftOut(
            "its URL would leave the source's origin"
            if pinned is not None
            else "its server is not the document's own: set base_url for this source"
        )


def _path_name(method: str, path: str) -> str:
    """The name of an operation without ``operationId``: ``GET /pets/{id}`` → ``get_pets_id``."""
    words = [w.strip("{}") for w in path.split("/") if w.strip("{}")]
    return "_".join([method, *words])


def _matches(patterns: list[str], selectors: list[str], matched: set[str]) -> bool:
    hit = False
    for pattern in patterns:
        if any(s and fnmatch.fnmatchcase(s, pattern) for s in selectors):
            matched.add(pattern)
            hit = True
    return hit


def _operation_spec(
    document: dict[str, Any],
    resolver: SchemaResolver,
    source: OpenApiSource,
    where: str,
    path: str,
    item: dict[str, Any],
    method: str,
    operation: dict[str, Any],
    name: str,
) -> ToolSpec:
    if not path.startswith("/"):
        raise OperationLeftOut("its path does not begin with '/'")
    properties: dict[str, Any] = {}
    required: list[str] = []
    query: dict[str, str] = {}
    headers: dict[str, str] = {}
    auth_query: dict[str, str] = {}
    auth_headers: dict[str, str] = {}
    _apply_security(document, source, operation, auth_query, auth_headers)
    # What the operator configured wins: a parameter naming it, in any case, is dropped.
    if source.connection is not None:  # the user's token is the one credential sent
        auth_query, auth_headers = {}, {}
    fixed_headers = _IGNORED_HEADERS | {k.lower() for k in (*source.headers, *auth_headers)}
    if source.connection is not None:
        fixed_headers |= {"authorization"}
    fixed_query = {k.lower() for k in auth_query}
    url_path = path
    for parameter in _parameters(resolver, item, operation):
        location, raw = parameter["in"], parameter["name"]
        if location == "header" and raw.lower() in fixed_headers:
            continue
        if location == "query" and raw.lower() in fixed_query:
            continue
        if location == "cookie":
            if parameter.get("required"):
                raise OperationLeftOut(
                    f"needs the cookie parameter {raw!r}, which tools cannot send"
                )
            continue
        argument = raw if raw not in properties else f"{location}_{raw}"
        if argument in properties:
            raise OperationLeftOut(f"two parameters are both named {raw!r}")
        schema = _parameter_schema(resolver, parameter)
        description = parameter.get("description")
        if isinstance(description, str) and description and "description" not in schema:
            schema = {**schema, "description": description}
        properties[argument] = schema
        if location == "path" or parameter.get("required"):
            required.append(argument)
        placeholder = "{" + argument + "}"
        if location == "path":
            if "{" + raw + "}" not in url_path:
                raise OperationLeftOut(f"the path parameter {raw!r} is not in the path")
            url_path = url_path.replace("{" + raw + "}", placeholder)
        elif location == "query":
            query[raw] = placeholder
        elif location == "header":
            headers[raw] = placeholder
    body_argument, extra = None, False
    if method.upper() in BODY_METHODS:
        body_argument, extra = _body(resolver, operation, properties, required, headers)
    headers = _merged(headers, source.headers, auth_headers)
    query |= auth_query
    # Parameters are all declared: anything else the model writes is refused, not
    # sent; an object body's own rule on extra properties decides for the body.
    arguments: dict[str, Any] = {"type": "object", "properties": properties}
    if extra is not True:
        arguments["additionalProperties"] = extra
    if required:
        arguments["required"] = required
    try:
        return ToolSpec.model_validate(
            {
                "name": name,
                "description": _description(operation),
                "parameters": arguments,
                "http": {
                    "method": method.upper(),
                    "url": _base_url(document, source, where, item, operation) + _encoded(url_path),
                    "query": query,
                    "headers": headers,
                    "timeout_s": source.timeout_s,
                    "retries": source.retries,
                    "body": body_argument,
                    "trace_context": source.trace_context,
                },
                "result": source.result,
                "auth": {"connection": source.connection} if source.connection else None,
                "returns": answer_fields(resolver, operation),
            }
        )
    except ValidationError as exc:
        raise OperationLeftOut(describe_validation_error(exc)) from exc


def _merged(*layers: Mapping[str, str]) -> dict[str, str]:
    """Headers from ``layers``, a later layer's value winning over an earlier one's of
    the same name in any letter case."""
    merged: dict[str, tuple[str, str]] = {}
    for layer in layers:
        for name, value in layer.items():
            merged[name.lower()] = (name, value)
    return dict(merged.values())


_PLACEHOLDER = re.compile(r"(\{[^{}]+\})")


def _encoded(path: str) -> str:
    """The path's literal parts percent-encoded (a space, a non-ASCII letter); the
    placeholders are filled, and encoded, per call."""
    parts = _PLACEHOLDER.split(path)
    return "".join(
        part if index % 2 else quote(part, safe="/:@!$&'()*+,;=-._~%")
        for index, part in enumerate(parts)
    )


def _parameters(
    resolver: SchemaResolver, item: dict[str, Any], operation: dict[str, Any]
) -> list[dict[str, Any]]:
    """The path item's parameters, overridden by the operation's of the same name and place."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for raw in [*item.get("parameters", []), *operation.get("parameters", [])]:
        try:
            parameter = resolver.follow(raw)
        except RefError as exc:
            raise OperationLeftOut(str(exc)) from exc
        if not isinstance(parameter, dict):
            continue
        name, location = parameter.get("name"), parameter.get("in")
        if not isinstance(name, str) or location not in ("path", "query", "header", "cookie"):
            raise OperationLeftOut(
                f"a parameter without a valid name and place: {name!r} in {location!r}"
            )
        found[(location, name)] = parameter
    return list(found.values())


def _parameter_schema(resolver: SchemaResolver, parameter: dict[str, Any]) -> dict[str, Any]:
    if "schema" in parameter:
        return resolver.schema(parameter["schema"])
    content = parameter.get("content")
    if isinstance(content, dict) and content:
        media = next(iter(content.values()))
        if isinstance(media, dict) and "schema" in media:
            return resolver.schema(media["schema"])
    return {"type": "string"}


def _body(
    resolver: SchemaResolver,
    operation: dict[str, Any],
    properties: dict[str, Any],
    required: list[str],
    headers: dict[str, str],
) -> tuple[str | None, Any]:
    """Add the JSON body to the arguments. Returns the argument holding it whole, if
    one does, and what the arguments' ``additionalProperties`` is: an object body's
    own, else false. A JSON media type other than ``application/json`` is sent as the
    Content-Type."""
    if "requestBody" not in operation:
        return None, False
    try:
        body = resolver.follow(operation["requestBody"])
    except RefError as exc:
        raise OperationLeftOut(str(exc)) from exc
    content = body.get("content") if isinstance(body, dict) else None
    if not isinstance(content, dict) or not content:
        return None, False
    kind = next((k for k in content if _is_json(k)), None)
    media = content.get(kind) if kind is not None else None
    if kind is None or not isinstance(media, dict):
        raise OperationLeftOut(f"its request body is {', '.join(content)}, not JSON")
    if kind.split(";")[0].strip().lower() not in ("application/json", "*/*"):
        headers["Content-Type"] = kind
    schema = resolver.schema(media.get("schema", {}))
    body_required = body.get("required") is True
    fields = schema.get("properties")
    if (
        schema.get("type") == "object"
        and isinstance(fields, dict)
        and fields
        and not set(fields) & set(properties)
        and not any(k in schema for k in ("allOf", "anyOf", "oneOf"))
    ):
        properties.update(fields)
        if body_required:
            required.extend(r for r in schema.get("required", []) if r in fields)
        return None, schema.get("additionalProperties", True)
    argument = "body" if "body" not in properties else "request_body"
    properties[argument] = schema
    if body_required:
        required.append(argument)
    return argument, False


def _is_json(media_type: str) -> bool:
    kind = media_type.split(";")[0].strip().lower()
    return kind == "application/json" or kind.endswith("+json") or kind == "*/*"


def _description(operation: dict[str, Any]) -> str:
    parts = [operation.get("summary"), operation.get("description")]
    text = "\n\n".join(p.strip() for p in parts if isinstance(p, str) and p.strip())
    return text if len(text) <= _MAX_DESCRIPTION else text[: _MAX_DESCRIPTION - 1] + "…"


def _base_url(
    document: dict[str, Any],
    source: OpenApiSource,
    where: str,
    item: dict[str, Any],
    operation: dict[str, Any],
) -> str:
    if source.base_url:
        return source.base_url.rstrip("/")
    for servers in (operation.get("servers"), item.get("servers"), document.get("servers")):
        if isinstance(servers, list) and servers and isinstance(servers[0], dict):
            url = _server_url(servers[0])
            if url.startswith(("http://", "https://")):
                return url.rstrip("/")
            if source.is_url:
                return urljoin(source.spec, url).rstrip("/")
            raise OperationLeftOut(
                f"its server URL {url!r} is relative: set base_url for this source"
            )
    raise OperationLeftOut("the document names no server: set base_url for this source")


def _server_url(server: Mapping[str, Any]) -> str:
    url = str(server.get("url", ""))
    variables = server.get("variables")
    if isinstance(variables, dict):
        for key, variable in variables.items():
            if isinstance(variable, dict) and "default" in variable:
                url = url.replace("{" + key + "}", str(variable["default"]))
    return url


def _apply_security(
    document: dict[str, Any],
    source: OpenApiSource,
    operation: dict[str, Any],
    query: dict[str, str],
    headers: dict[str, str],
) -> None:
    """Fill the first security requirement the configured secrets satisfy."""
    requirements = operation.get("security", document.get("security"))
    components = document.get("components")
    schemes = components.get("securitySchemes") if isinstance(components, dict) else None
    if not isinstance(requirements, list) or not isinstance(schemes, dict):
        return
    for requirement in requirements:
        if not isinstance(requirement, dict):
            continue
        if all(name in source.auth and name in schemes for name in requirement):
            for name in requirement:
                _fill(name, schemes[name], source.auth[name].get_secret_value(), query, headers)
            return


def _fill(
    name: str, scheme: Any, secret: str, query: dict[str, str], headers: dict[str, str]
) -> None:
    if "{" in secret or "}" in secret or not is_header_text(secret):
        raise ToolConfigError(f"auth.{name}: a secret with braces or line breaks cannot be sent")
    if not isinstance(scheme, dict):
        return
    kind = scheme.get("type")
    if kind == "apiKey":
        place, key = scheme.get("in"), str(scheme.get("name", ""))
        if place == "header":
            headers[key] = secret
        elif place == "query":
            query[key] = secret
        elif place == "cookie":
            headers["Cookie"] = f"{key}={secret}"
    elif kind == "http" and str(scheme.get("scheme", "")).lower() == "basic":
        headers["Authorization"] = "Basic " + base64.b64encode(secret.encode()).decode()
    elif kind in ("http", "oauth2", "openIdConnect"):
        headers["Authorization"] = f"Bearer {secret}"
