"""One page of a list route (``/v1/responses/{id}/input_items``, conversation items),
as OpenAI pages them: ``order`` (``desc`` by default: newest first), ``after`` (an
item id: the page starts past it), ``limit`` (1 to 100, default 20), ``has_more``."""

from __future__ import annotations

from typing import Any

from starlette.datastructures import QueryParams

from gateway.digits import whole
from gateway.errors import BadRequest

DEFAULT_LIMIT = 20
MAX_LIMIT = 100


def _limit(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_LIMIT
    limit = whole(raw)
    if limit is None or not 1 <= limit <= MAX_LIMIT:
        raise BadRequest(f"'limit' must be a whole number from 1 to {MAX_LIMIT}.", param="limit")
    return limit


def page(items: list[dict[str, Any]], query: QueryParams) -> dict[str, Any]:
    """The page of ``items`` (oldest first, each with an ``id``) that ``query`` asks for."""
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise BadRequest("'order' must be 'asc' or 'desc'.", param="order")
    limit = _limit(query.get("limit"))
    ordered = items if order == "asc" else items[::-1]
    after = query.get("after")
    if after is not None:
        ids = [item.get("id") for item in ordered]
        if after not in ids:
            raise BadRequest(f"No item {after!r} to list after.", param="after")
        ordered = ordered[ids.index(after) + 1 :]
    data = ordered[:limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(ordered) > limit,
    }
