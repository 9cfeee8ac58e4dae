"""What an OpenAPI operation answers, for tool search (docs/tools.md, "Whole tasks"):
the field names of its success response's JSON body (``Tool.returns``) and the
operations its response links name (``Tool.feeds``). Both are read from hostile
documents: bounded, and never a reason to leave an operation out."""

from __future__ import annotations

from itertools import islice
from typing import Any

from tool_registry.errors import ExpansionError, RefError
from tool_registry.registry import tool_name

from .openapi_schema import SchemaResolver

_ANSWER_FIELDS = 64  # of a level of an answer's schema, the fields kept
_ANSWER_FIELDS_IN_ALL = 256  # of an answer's schema, the fields kept in all
_LINKS = 16  # of an answer's links, the most read


def _success(resolver: SchemaResolver, operation: dict[str, Any]) -> dict[str, Any] | None:
    """The operation's first success response (2xx, else ``default``), followed."""
    responses = operation.get("responses")
    if not isinstance(responses, dict):
        return None
    codes = sorted(str(code) for code in responses if str(code).startswith("2"))
    for code in (*codes, "default"):
        found = responses.get(code, responses.get(int(code)) if code.isdigit() else None)
        try:
            response = resolver.follow(found)
        except RefError:
            continue
        if isinstance(response, dict):
            return response
    return None


def answer_fields(resolver: SchemaResolver, operation: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON Schema of the operation's success answer, where it has a JSON one (tool
    search reads its fields to bring producers along): never a reason to leave the
    operation out."""
    response = _success(resolver, operation)
    content = response.get("content") if response is not None else None
    if not isinstance(content, dict):
        return None
    for media, body in content.items():
        if str(media).split(";")[0].strip().endswith(("/json", "+json")) and isinstance(body, dict):
            try:
                return _fields_only(resolver.schema(body.get("schema", {}), request=False)) or None
            except (RefError, ExpansionError, RecursionError, TypeError, ValueError):
                return None
    return None


def _fields_only(schema: Any, depth: int = 0, left: list[int] | None = None) -> dict[str, Any]:
    """Of an answer's schema, what tool search reads: its fields' names, a few levels,
    at most ``_ANSWER_FIELDS`` a level and ``_ANSWER_FIELDS_IN_ALL`` in all (``left``)."""
    left = [_ANSWER_FIELDS_IN_ALL] if left is None else left
    out: dict[str, Any] = {}
    if not isinstance(schema, dict) or depth > 3:
        return out
    properties = schema.get("properties")
    if isinstance(properties, dict):
        kept: dict[str, Any] = {}
        for name, inner in islice(properties.items(), _ANSWER_FIELDS):
            if left[0] <= 0:
                break
            left[0] -= 1
            kept[str(name)] = _fields_only(inner, depth + 1, left)
        out["properties"] = kept
    items = schema.get("items")
    if isinstance(items, dict) and left[0] > 0:
        out["items"] = _fields_only(items, depth + 1, left)
    return out


def linked(resolver: SchemaResolver, operation: dict[str, Any], prefix: str) -> tuple[str, ...]:
    """The tools the operation's success answer links to (OpenAPI links by
    ``operationId``): its answer gives their arguments."""
    response = _success(resolver, operation)
    links = response.get("links") if response is not None else None
    if not isinstance(links, dict):
        return ()
    named = []
    for link in list(links.values())[:_LINKS]:
        try:
            link = resolver.follow(link)
        except RefError:
            continue
        target = link.get("operationId") if isinstance(link, dict) else None
        if isinstance(target, str) and target:
            named.append(tool_name(prefix, target))
    return tuple(dict.fromkeys(named))
