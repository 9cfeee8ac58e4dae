"""What every model surface does with a request before and after its own part."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from starlette.requests import Request

from gateway.policy.tenants import Tenant
from gateway.runtime.snapshot import Runtime
from gateway.surfaces.forward import Meter
from gateway.surfaces.http import Exchange

SHADOWED_HEADER = "x-toolgate-shadowed-tools"

# The runtime snapshot a request uses to its end, who is asking, and how its usage is
# charged (None: the tenant has no token limit).
Admit = Callable[[Request, Exchange], Awaitable[tuple[Runtime, Tenant, Meter | None]]]


def first_byte(exchange: Exchange) -> None:
    exchange.first_byte = time.perf_counter()
