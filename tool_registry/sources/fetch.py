"""Fetching a tool source's document (an OpenAPI document at a URL) under the egress
policy: every hop of a redirect is checked, the body is capped, and the answer is
parsed as JSON or YAML."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import yaml

from tool_registry.client import GuardedTransport, send
from tool_registry.egress import egress_denial
from tool_registry.errors import EgressDenied, ToolConfigError
from tool_registry.executor import MAX_REDIRECTS, read_capped, redirect_request
from tool_registry.jsonio import loads
from tool_registry.redact import display_url
from tool_registry.request_builder import USER_AGENT

from .yaml import yaml_problem

MAX_DOCUMENT_BYTES = 16 * 1024 * 1024


class _NoAliases(yaml.SafeLoader):
    """YAML without anchors and aliases: a fetched document is not ours to trust, and
    a few nested aliases expand to gigabytes (the "billion laughs")."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not accepted here")
        return super().compose_node(parent, index)


def parse_document(text: bytes | str, where: str) -> Any:
    """A JSON or YAML document; ``ToolConfigError`` naming ``where`` if it is neither,
    or if it nests deeper than the parsers go (a hostile document's 50,000 brackets)."""
    try:
        return loads(text)
    except ValueError:
        pass
    try:
        return yaml.load(text, Loader=_NoAliases)  # a SafeLoader without aliases
    except yaml.YAMLError as exc:
        raise ToolConfigError(f"{where}: neither JSON nor YAML: {yaml_problem(exc)}") from exc
    except RecursionError as exc:
        raise ToolConfigError(f"{where}: the document nests too deep") from exc


async def fetch_document(
    url: str,
    transport: GuardedTransport,
    *,
    timeout_s: float = 10.0,
    headers: dict[str, str] | None = None,
) -> Any:
    """GET ``url`` and parse it; raise ``ToolConfigError`` saying what went wrong, the
    URL named as it may be shown (``display_url``: no password or query value)."""
    where = display_url(url)
    try:
        request = httpx.Request(
            "GET",
            url,
            headers={"user-agent": USER_AGENT, "accept": "application/json, application/yaml"}
            | (headers or {}),
        )
    except httpx.InvalidURL as exc:
        raise ToolConfigError(f"{where}: not a valid URL") from exc
    request.extensions["timeout"] = httpx.Timeout(timeout_s).as_dict()
    try:
        async with asyncio.timeout(timeout_s):
            for _ in range(MAX_REDIRECTS + 1):
                response = await send(transport, request)
                try:
                    if response.status_code in (301, 302, 303, 307, 308):
                        request = redirect_request(request, response)
                        continue
                    body, cut = await read_capped(response, MAX_DOCUMENT_BYTES)
                finally:
                    await response.aclose()
                break
            else:
                raise ToolConfigError(f"{where}: redirected too many times")
    except TimeoutError as exc:
        raise ToolConfigError(f"{where}: no answer within {timeout_s:g}s") from exc
    except (httpx.HTTPError, OSError, EgressDenied) as exc:
        denial = egress_denial(exc)
        if denial is not None:
            raise ToolConfigError(f"{where}: refused by the egress policy: {denial}") from exc
        raise ToolConfigError(f"{where}: cannot be fetched ({type(exc).__name__})") from exc
    if not 200 <= response.status_code < 300:
        raise ToolConfigError(f"{where}: answered HTTP {response.status_code}")
    if cut:
        raise ToolConfigError(f"{where}: larger than {MAX_DOCUMENT_BYTES} bytes")
    return await asyncio.to_thread(parse_document, body, where)  # megabytes of YAML: CPU work
