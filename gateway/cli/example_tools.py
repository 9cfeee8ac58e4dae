"""``toolgate example-tools``: the HTTP tools of the example configuration, served on
``127.0.0.1:9100`` so that ``make run`` ends in a real tool round.

- ``GET /len?s=…`` → ``{"length": n}`` (``string_length``)
- ``POST /add`` ``{"a", "b"}`` → ``{"sum": …}`` (``add``)
- ``GET /sqrt?x=…`` → ``{"sqrt": …}`` (``sqrt``)
- ``GET /crm/{tenant}/customers/{customer}`` → the customer of that tenant
  (``crm_lookup``, whose ``tenant`` the gateway binds: a tenant sees only its own)

Bad input is a 400 with a JSON error, as a real service would answer.
"""

from __future__ import annotations

import math
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

# A few customers per tenant: "default" is the tenant of a gateway without tenants.
CUSTOMERS: dict[str, dict[str, dict[str, Any]]] = {
    "default": {
        "ada@example.com": {"name": "Ada Lovelace", "plan": "enterprise", "open_tickets": 2},
        "alan@example.com": {"name": "Alan Turing", "plan": "team", "open_tickets": 0},
    },
    "acme": {
        "wile@acme.example": {"name": "Wile E. Coyote", "plan": "starter", "open_tickets": 7},
    },
}


def _bad(message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=400)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


async def length(request: Request) -> JSONResponse:
    text = request.query_params.get("s")
    if text is None:
        return _bad("query parameter 's' is required")
    return JSONResponse({"length": len(text)})


async def add(request: Request) -> JSONResponse:
    try:
        body = await request.json()
    except ValueError:
        return _bad("the body must be JSON")
    a = _number(body.get("a")) if isinstance(body, dict) else None
    b = _number(body.get("b")) if isinstance(body, dict) else None
    if a is None or b is None:
        return _bad("'a' and 'b' must be numbers")
    total = a + b
    return JSONResponse({"sum": int(total) if total.is_integer() else total})


async def sqrt(request: Request) -> JSONResponse:
    x = _number(request.query_params.get("x"))
    if x is None or x < 0:
        return _bad("'x' must be a non-negative number")
    return JSONResponse({"sqrt": math.sqrt(x)})


async def customer(request: Request) -> JSONResponse:
    tenant = request.path_params["tenant"]
    found = CUSTOMERS.get(tenant, {}).get(request.path_params["customer"].lower())
    if found is None:
        return JSONResponse({"error": "no such customer for this tenant"}, status_code=404)
    acting = request.headers.get("x-acting-user")
    return JSONResponse({**found, "tenant": tenant, "looked_up_by": acting or None})


async def health(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok", "tools": ["string_length", "add", "sqrt", "crm_lookup"]})


def create_example_tools_app() -> Starlette:
    return Starlette(
        routes=[
            Route("/", health, methods=["GET", "HEAD"]),
            Route("/len", length, methods=["GET"]),
            Route("/add", add, methods=["POST"]),
            Route("/sqrt", sqrt, methods=["GET"]),
            Route("/crm/{tenant}/customers/{customer}", customer, methods=["GET"]),
        ]
    )
