"""Turning a validated tool call into an HTTP request (pure: no I/O): a ``ToolRequest``,
the call's own value, made once and sent as it is (on aiohttp directly; as an
``httpx.Request`` only through another transport, a test's, or for a redirect's hop).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

import httpx
from httpx._urlparse import ParseResult

from .errors import MissingValue, ToolArgumentsInvalid
from .jsonio import dumps
from .spec import BODY_METHODS, HttpSpec, is_header_text
from .templates import placeholders, render, stringify
from .value_type import immutable

USER_AGENT = "toolgate"
NO_TIMEOUT: Mapping[str, float | None] = MappingProxyType({})
MAX_URL_CHARS = 8192  # what common servers and proxies take in a request line
# A configured path that needs no encoding: RFC 3986 path characters, and the braces
# of its placeholders (whose values are percent-encoded whole).
_PLAIN_PATH = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@/%{}]*")


def encode_path_value(value: str) -> str:
    """Percent-encode a path parameter, ``/`` included; a whole ``.`` or ``..`` too."""
    if value in (".", ".."):
        return value.replace(".", "%2E")
    return quote(value, safe="")


@immutable
class ToolRequest:
    """One call's HTTP request: its method, its URL as encoded (the configured origin's
    scheme, host and port), its headers by lower-case name (``host`` and
    ``content-length`` are the sender's to write), its body, and the timeouts of its
    phases (``httpx.Timeout.as_dict``). Cheap to make: an ``httpx.Request`` made of it
    costs about ten times as much, and is made only where one is needed
    (``as_httpx``)."""

    method: str
    url: httpx.URL
    headers: Mapping[str, str]
    content: bytes  # empty: none
    timeout: Mapping[str, float | None]

    def with_headers(self, more: Mapping[str, str]) -> ToolRequest:
        """The request with ``more`` headers (lower-case names), over any of theirs."""
        return ToolRequest(
            self.method, self.url, {**self.headers, **more}, self.content, self.timeout
        )

    def as_httpx(self) -> httpx.Request:
        """The request as httpx's, for a transport that is not aiohttp (a test's) and
        for a redirect's next hop."""
        request = httpx.Request(
            self.method, self.url, headers=self.headers, content=self.content or None
        )
        request.extensions["timeout"] = self.timeout
        return request

    @classmethod
    def of(cls, request: httpx.Request) -> ToolRequest:
        """httpx's request as one (a redirect's next hop): what httpx wrote of its own
        (``host``, ``content-length``) left to the sender, as for a first request."""
        headers = {k: v for k, v in request.headers.items() if k not in ("host", "content-length")}
        timeout = request.extensions.get("timeout", NO_TIMEOUT)
        return cls(request.method, request.url, headers, request.content, timeout)


def _query_value(value: Any) -> str | list[str]:
    if isinstance(value, list):
        return [stringify(v) for v in value]
    return stringify(value)


class RequestTemplate:
    """A tool's HTTP request with everything that does not depend on the arguments
    worked out once: the origin, the path template, the fixed query, the templates."""

    __slots__ = (
        "_body",
        "_body_argument",
        "_content_type",
        "_fixed_encoded",
        "_fixed_query",
        "_headers",
        "_origin",
        "_path",
        "_prefix",
        "_query",
        "_taken",
        "_timeout",
        "_used",
        "spec",
    )

    def __init__(self, spec: HttpSpec) -> None:
        self.spec = spec
        parts = urlsplit(spec.url)
        self._prefix = f"{parts.scheme}://{parts.netloc}"
        self._path = parts.path or "/"
        # The origin parsed once: a path that needs no encoding and a query that
        # ``urlencode`` wrote are put beside it as they are, not parsed again per call.
        origin = httpx.URL(self._prefix)._uri_reference
        self._origin = origin if _PLAIN_PATH.fullmatch(self._path) else None
        # The configured URL's own query, whose values may be templates too.
        self._fixed_query = [
            (key, value, "{" in value)
            for key, value in parse_qsl(parts.query, keep_blank_values=True)
        ]
        # The configured query without templates is the same for every call.
        fixed_templates = any(t for _, _, t in self._fixed_query)
        self._fixed_encoded = (
            "" if fixed_templates else urlencode([(k, v) for k, v, _ in self._fixed_query])
        )
        self._query = [
            (key, template, _whole_placeholder(template)) for key, template in spec.query.items()
        ]
        self._headers = [(k, t, _whole_placeholder(t)) for k, t in spec.headers.items()]
        self._taken = frozenset(
            key.lower() for key in (*spec.query, *(k for k, _, _ in self._fixed_query))
        )
        self._body_argument = spec.body
        # A configured Content-Type (an OpenAPI body's media type) wins over the default.
        self._content_type = not any(k.lower() == "content-type" for k in spec.headers)
        self._used = spec.template_names()
        self._body = spec.method in BODY_METHODS
        self._timeout = MappingProxyType(httpx.Timeout(spec.timeout_s).as_dict())

    def build(self, arguments: Mapping[str, Any]) -> ToolRequest:
        """The request for one call (see ``build_request``)."""
        try:
            path = render(self._path, arguments, encode=encode_path_value)
            fixed = self._fixed_encoded or urlencode(
                [(k, render(v, arguments) if t else v) for k, v, t in self._fixed_query]
            )
            query = self._render_query(arguments)
            headers = self._render_headers(arguments)
        except MissingValue as exc:
            raise ToolArgumentsInvalid(f"argument {exc.name!r} is required") from exc
        rest = {k: v for k, v in arguments.items() if k not in self._used}
        if not self._body:
            # A configured query parameter is the operator's, in any letter case: an
            # argument of that name never goes beside it.
            taken = self._taken | {key.lower() for key, _ in query}
            for key, value in rest.items():
                if key.lower() not in taken:
                    query.extend(_pairs(key, _query_value(value)))
        # Path values are percent-encoded whole ("/", "?", "#", "@" included) and the
        # query is urlencoded, so nothing an argument holds can reach the origin.
        encoded_query = "&".join(part for part in (fixed, urlencode(query)) if part) or None
        size = len(self._prefix) + len(path) + (len(encoded_query) + 1 if encoded_query else 0)
        if size > MAX_URL_CHARS:
            raise ToolArgumentsInvalid(
                f"the request URL would be {size} characters long, over the limit of "
                f"{MAX_URL_CHARS}: send shorter arguments"
            )
        url = self._url(path, encoded_query)
        method, content = self.spec.method, b""
        if self._body_argument is not None:
            if self._body_argument in arguments:  # else an optional body left out
                content = dumps(arguments[self._body_argument])
        elif self._body:
            content = dumps(rest)
        if content and self._content_type:
            headers["content-type"] = "application/json"
        return ToolRequest(method, url, headers, content, self._timeout)

    def _url(self, path: str, query: str | None) -> httpx.URL:
        if self._origin is None:
            return httpx.URL(self._prefix + path + (f"?{query}" if query is not None else ""))
        url = httpx.URL.__new__(httpx.URL)
        origin = self._origin
        url._uri_reference = ParseResult(
            origin.scheme, origin.userinfo, origin.host, origin.port, path, query, None
        )
        return url

    def _render_query(self, arguments: Mapping[str, Any]) -> list[tuple[str, str]]:
        query: list[tuple[str, str]] = []
        for key, template, whole in self._query:
            if whole is not None:
                # A whole-value template keeps lists as repeated parameters; an optional
                # argument the model left out leaves the parameter out.
                if whole in arguments:
                    query.extend(_pairs(key, _query_value(arguments[whole])))
                continue
            query.append((key, render(template, arguments)))
        return query

    def _render_headers(self, arguments: Mapping[str, Any]) -> dict[str, str]:
        headers = {"user-agent": USER_AGENT}
        for key, template, whole in self._headers:
            if whole is not None and whole not in arguments:
                continue  # an optional argument the model left out: no header
            value = render(template, arguments)
            if not is_header_text(value):
                # The value is not quoted back: it may hold a bound value.
                raise ToolArgumentsInvalid(
                    f"header {key}: the value holds characters an HTTP header cannot carry "
                    "(line breaks, control or non-ASCII characters)"
                )
            headers[key.lower()] = value
        return headers


def _whole_placeholder(template: str) -> str | None:
    names = placeholders(template)
    return names[0] if len(names) == 1 and template == "{" + names[0] + "}" else None


def _pairs(key: str, value: str | list[str]) -> list[tuple[str, str]]:
    return [(key, v) for v in value] if isinstance(value, list) else [(key, value)]


def build_request(spec: HttpSpec, arguments: Mapping[str, Any]) -> ToolRequest:
    """Build the request for one call.

    ``{name}`` in the URL path is a path parameter (percent-encoded, ``/`` included);
    ``query`` and ``headers`` are templates; the arguments no template uses go to the
    query string (GET, HEAD, DELETE) or a JSON body (POST, PUT, PATCH). The scheme,
    host and port are always those of the configured URL, and a query string in it
    stays.
    """
    return RequestTemplate(spec).build(arguments)
