"""Where a provider's endpoints are (docs/design.md §18): an authorization server's metadata
(RFC 8414, or OpenID Connect Discovery) and a protected resource's (RFC 9728, as the
MCP authorization specification uses it), fetched through the egress guard.

Everything fetched is hostile. A document is capped and read only as a JSON object; it
must name the issuer (or resource) it was asked for, exactly (a document for another
is a mix-up); every endpoint it names must be an http(s) URL on the issuer's own
origin or on an origin the operator listed (``endpoint_origins``): a document that
points elsewhere is refused, so no code, secret or token is sent where the operator
did not choose. Plain http is taken only where the issuer itself is plain http (a
loopback provider in development).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx

from gateway.runtime.outbound import Unreached, fetch, peek
from tool_registry import GuardedTransport, immutable, loads_object

MAX_DOCUMENT_BYTES = 256 * 1024
TIMEOUT_S = 10.0
KEPT_S = 3600.0  # a document is fetched again after this long
MAX_URL_CHARS = 2048
CHALLENGE_TIMEOUT_S = 5.0  # an MCP server's 401, asked for where its metadata is
_RESOURCE_METADATA = re.compile(r'resource_metadata="([^"\s]{1,2048})"')


class DiscoveryFailed(ValueError):
    """A metadata document could not be fetched or cannot be believed; says why."""


class DiscoveryUnreached(DiscoveryFailed):
    """No metadata document could be reached at all (try again later)."""


Origin = tuple[str, str, int]


def origin(url: str) -> Origin:
    """A URL's scheme, host and port (the default port filled in)."""
    parts = urlsplit(url)
    default = 443 if parts.scheme == "https" else 80
    try:
        port = parts.port or default
    except ValueError:
        port = -1
    return parts.scheme, (parts.hostname or "").lower(), port


@immutable
class ServerMetadata:
    """What an authorization server says of itself (the fields the gateway uses)."""

    issuer: str
    authorization_endpoint: str | None
    token_endpoint: str | None  # an identity provider for users' tokens may need none
    revocation_endpoint: str | None = None
    registration_endpoint: str | None = None
    jwks_uri: str | None = None
    iss_parameter: bool = False  # it names itself in its callbacks (RFC 9207)


@immutable
class ResourceMetadata:
    """What a protected resource says of itself (RFC 9728)."""

    resource: str
    authorization_servers: tuple[str, ...]
    scopes: tuple[str, ...] = ()


def well_known(base: str, suffix: str, *, inserted: bool) -> str:
    """``base``'s well-known URL: RFC 8414 and 9728 insert the suffix before the path
    (``/.well-known/x/path``); OpenID Connect appends it (``/path/.well-known/x``)."""
    parts = urlsplit(base)
    path = parts.path.rstrip("/")
    root = f"{parts.scheme}://{parts.netloc}"
    if inserted:
        return f"{root}/.well-known/{suffix}{path}"
    return f"{root}{path}/.well-known/{suffix}"


def _root(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _endpoint(
    found: Mapping[str, Any], key: str, allowed: frozenset[Origin], *, required: bool
) -> str | None:
    url = found.get(key)
    if url is None and not required:
        return None
    if not isinstance(url, str) or len(url) > MAX_URL_CHARS or "#" in url:
        raise DiscoveryFailed(f"its {key} is not a URL")
    if origin(url) not in allowed:
        raise DiscoveryFailed(f"its {key} is on another origin than the issuer's")
    return url


def allowed_origins(base: str, more: Iterable[str] = ()) -> frozenset[Origin]:
    """The origins endpoints may be on: ``base``'s and those listed; an http one only
    where ``base`` itself is http."""
    found = {origin(base), *(origin(url) for url in more)}
    plain = origin(base)[0] == "http"
    return frozenset(o for o in found if o[0] == "https" or (plain and o[0] == "http"))


class Discovery:
    """Metadata documents, fetched when first needed and kept ``KEPT_S``; a failed
    fetch is not kept (the next use tries again)."""

    def __init__(
        self, transport: GuardedTransport, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._transport = transport
        self._clock = clock
        self._servers: dict[tuple[str, frozenset[Origin], bool], tuple[float, ServerMetadata]] = {}
        self._resources: dict[str, tuple[float, ResourceMetadata]] = {}

    async def server(
        self, issuer: str, more_origins: Iterable[str] = (), *, openid: bool = False
    ) -> ServerMetadata:
        """The authorization server ``issuer``'s metadata: RFC 8414's document, else
        OpenID Connect's (both are tried, as the MCP specification has clients do);
        ``openid``: OpenID Connect's only (an identity provider's, for its keys)."""
        allowed = allowed_origins(issuer, more_origins)
        key = (issuer, allowed, openid)
        kept = self._servers.get(key)
        if kept is not None and self._clock() - kept[0] < KEPT_S:
            return kept[1]
        urls = [
            well_known(issuer, "oauth-authorization-server", inserted=True),
            well_known(issuer, "openid-configuration", inserted=True),
            well_known(issuer, "openid-configuration", inserted=False),
        ][1 if openid else 0 :]
        if openid:  # OpenID Connect Discovery appends to the issuer's path
            urls.reverse()
        found = await self._first(urls, f"no metadata for {issuer}")
        metadata = _server_of(found, issuer, allowed)
        self._servers[key] = (self._clock(), metadata)
        return metadata

    async def resource(self, url: str) -> ResourceMetadata:
        """The protected resource ``url``'s metadata (RFC 9728): where its 401 says
        (``WWW-Authenticate: Bearer resource_metadata="..."``, on its own origin only),
        else at its well-known URLs. The 401 is asked for only when the metadata is not
        kept."""
        kept = self._resources.get(url)
        if kept is not None and self._clock() - kept[0] < KEPT_S:
            return kept[1]
        urls = [
            well_known(url, "oauth-protected-resource", inserted=True),
            well_known(_root(url), "oauth-protected-resource", inserted=True),
        ]
        named = await self._challenge(url)
        if named is not None:
            if origin(named) != origin(url):
                raise DiscoveryFailed("its resource_metadata is on another origin")
            urls.insert(0, named)
        found = await self._first(urls, f"no resource metadata for {url}")
        metadata = _resource_of(found, url)
        self._resources[url] = (self._clock(), metadata)
        return metadata

    async def _challenge(self, url: str) -> str | None:
        """Where a resource's 401, asked with no token, says its metadata is."""
        try:
            request = httpx.Request("GET", url, headers={"accept": "text/event-stream"})
            status, headers = await peek(self._transport, request, CHALLENGE_TIMEOUT_S)
        except (Unreached, httpx.InvalidURL):
            return None
        if status != 401:
            return None
        found = _RESOURCE_METADATA.search(headers.get("www-authenticate", "")[:4096])
        return found.group(1) if found is not None else None

    async def _first(self, urls: list[str], none: str) -> dict[str, Any]:
        """The first of ``urls`` that answers a JSON object (each tried in turn)."""
        failures: list[DiscoveryFailed] = []
        for url in dict.fromkeys(urls):
            try:
                return await self._document(url)
            except DiscoveryFailed as exc:
                failures.append(exc)
        kind = (
            DiscoveryUnreached
            if all(isinstance(f, DiscoveryUnreached) for f in failures)
            else DiscoveryFailed
        )
        raise kind(f"{none}: {failures[-1]}")

    async def document(self, url: str) -> dict[str, Any]:
        """One JSON document (a JWKS, say), fetched as metadata is; never kept."""
        return await self._document(url)

    async def _document(self, url: str) -> dict[str, Any]:
        try:
            request = httpx.Request("GET", url, headers={"accept": "application/json"})
        except httpx.InvalidURL as exc:
            raise DiscoveryFailed("not a URL") from exc
        try:
            got = await fetch(self._transport, request, TIMEOUT_S, MAX_DOCUMENT_BYTES)
        except Unreached as exc:
            raise DiscoveryUnreached(f"it could not be reached ({exc})") from exc
        if got.status != 200 or got.cut:
            raise DiscoveryFailed(f"it answered {got.status}" + (", too much" if got.cut else ""))
        found = loads_object(got.body)
        if found is None:
            raise DiscoveryFailed("it did not answer with a JSON object")
        return found


def _server_of(found: Mapping[str, Any], issuer: str, allowed: frozenset[Origin]) -> ServerMetadata:
    if found.get("issuer") != issuer:
        raise DiscoveryFailed("its metadata names another issuer")
    methods = found.get("code_challenge_methods_supported")
    if isinstance(methods, list) and "S256" not in methods:
        raise DiscoveryFailed("it does not support PKCE with S256")
    return ServerMetadata(
        issuer=issuer,
        authorization_endpoint=_endpoint(found, "authorization_endpoint", allowed, required=False),
        token_endpoint=_endpoint(found, "token_endpoint", allowed, required=False),
        revocation_endpoint=_endpoint(found, "revocation_endpoint", allowed, required=False),
        registration_endpoint=_endpoint(found, "registration_endpoint", allowed, required=False),
        jwks_uri=_endpoint(found, "jwks_uri", allowed, required=False),
        iss_parameter=found.get("authorization_response_iss_parameter_supported") is True,
    )


def _resource_of(found: Mapping[str, Any], url: str) -> ResourceMetadata:
    named = found.get("resource")
    if not isinstance(named, str) or named.rstrip("/") != url.rstrip("/"):
        raise DiscoveryFailed("its metadata names another resource")
    servers = found.get("authorization_servers")
    if not isinstance(servers, list) or not servers:
        raise DiscoveryFailed("it names no authorization server")
    issuers = tuple(s for s in servers[:8] if isinstance(s, str) and len(s) <= MAX_URL_CHARS)
    if not issuers or any(not s.startswith(("https://", "http://")) for s in issuers):
        raise DiscoveryFailed("an authorization server it names is not an http(s) URL")
    scopes = found.get("scopes_supported")
    listed = (
        tuple(s for s in scopes[:64] if isinstance(s, str) and s.isprintable() and len(s) < 256)
        if isinstance(scopes, list)
        else ()
    )
    return ResourceMetadata(named, issuers, listed)
