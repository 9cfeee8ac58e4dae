"""Turning a validated tool call into an HTTP request (pure: no I/O)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx

from .errors import ToolArgumentsInvalid
from .spec import BODY_METHODS, HttpSpec
from .templates import MissingValue, placeholders, render, stringify

USER_AGENT = "toolgate"
_FORBIDDEN_HEADER_CHARS = ("\r", "\n", "\0")


def encode_path_value(value: str) -> str:
    """Percent-encode a path parameter, ``/`` included; a whole ``.`` or ``..`` too."""
    if value in (".", ".."):
        return value.replace(".", "%2E")
    return quote(value, safe="")


def _query_value(value: Any) -> str | list[str]:
    if isinstance(value, list):
        return [stringify(v) for v in value]
    return stringify(value)


def _render_query(spec: HttpSpec, arguments: Mapping[str, Any]) -> dict[str, Any]:
    query: dict[str, Any] = {}
    for key, template in spec.query.items():
        names = placeholders(template)
        if len(names) == 1 and template == "{" + names[0] + "}":
            # A whole-value template keeps lists as repeated parameters; an optional
            # argument the model left out leaves the parameter out.
            if names[0] in arguments:
                query[key] = _query_value(arguments[names[0]])
            continue
        query[key] = render(template, arguments)
    return query


def _render_headers(spec: HttpSpec, arguments: Mapping[str, Any]) -> dict[str, str]:
    headers = {"user-agent": USER_AGENT}
    for key, template in spec.headers.items():
        value = render(template, arguments)
        if any(c in value for c in _FORBIDDEN_HEADER_CHARS):
            raise ToolArgumentsInvalid(f"header {key}: value contains a line break")
        headers[key] = value
    return headers


def build_request(spec: HttpSpec, arguments: Mapping[str, Any]) -> httpx.Request:
    """Build the request for one call.

    ``{name}`` in the URL is a path parameter (percent-encoded, ``/`` included);
    ``query`` and ``headers`` are templates; the arguments no template uses go to the
    query string (GET, HEAD, DELETE) or a JSON body (POST, PUT, PATCH). The scheme,
    host and port are always those of the configured URL.
    """
    try:
        url = httpx.URL(render(spec.url, arguments, encode=encode_path_value))
        query = _render_query(spec, arguments)
        headers = _render_headers(spec, arguments)
    except MissingValue as exc:
        raise ToolArgumentsInvalid(f"argument {exc.name!r} is required") from exc

    configured = httpx.URL(spec.url.replace("{", "").replace("}", ""))
    if (url.scheme, url.host, url.port) != (configured.scheme, configured.host, configured.port):
        raise ToolArgumentsInvalid("arguments may not change the tool's address")

    used = spec.template_names()
    rest = {k: v for k, v in arguments.items() if k not in used}
    if spec.method not in BODY_METHODS:
        for key, value in rest.items():
            query.setdefault(key, _query_value(value))
    if query:  # merged: a query string in the configured URL stays
        url = url.copy_merge_params(query)
    if spec.method in BODY_METHODS:
        return httpx.Request(spec.method, url, headers=headers, json=rest)
    return httpx.Request(spec.method, url, headers=headers)
