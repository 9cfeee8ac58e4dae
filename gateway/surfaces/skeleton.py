"""What every model surface does with a request before and after its own part."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from starlette.requests import Request

from gateway.engine.loop import Run
from gateway.policy.tenants import Tenant
from gateway.runtime.snapshot import Runtime
from gateway.surfaces.forward import Meter
from gateway.surfaces.http import Exchange

SHADOWED_HEADER = "x-toolgate-shadowed-tools"
STOPPED_HEADER = "x-toolgate-stopped"  # the cap that ended a run

# The runtime snapshot a request uses to its end, who is asking, and how its usage is
# charged (None: the tenant has no token limit).
Admit = Callable[[Request, Exchange], Awaitable[tuple[Runtime, Tenant, Meter | None]]]


def first_byte(exchange: Exchange) -> None:
    exchange.first_byte = time.perf_counter()


def completion_id(exchange: Exchange) -> str:
    """The id of the completion a request answers with, streamed or not: the gateway's."""
    return f"chatcmpl-{exchange.request_id.removeprefix('req_')}"


def loop_headers(run: Run) -> dict[str, str]:
    """What a loop's answer says of the request's rounds: how many, how many tool
    calls, and the cap that forced the last round, if one did."""
    state = run.state
    headers = {
        "x-toolgate-iterations": str(state.iterations),
        "x-toolgate-tool-calls": str(state.tool_calls),
    }
    stopped = run.stopped
    if stopped is not None:
        headers[STOPPED_HEADER] = stopped
    return headers
