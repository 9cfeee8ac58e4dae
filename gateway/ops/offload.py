"""Work that grows with what a client sent — decoding a large body, translating and
digesting a long conversation — done in a worker thread, so the event loop goes on
serving other requests meanwhile. Python code yields the interpreter to the loop
every few milliseconds (``sys.getswitchinterval``); one C call does not: decoding
JSON holds it for its whole length (about 2 ms per MiB of an agent's text-heavy
session, up to about 20 ms per MiB of a body of tiny objects), which is what
``server.max_body_bytes`` bounds."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


async def offload(heavy: bool, work: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``work(*args, **kwargs)``: in a worker thread if ``heavy``, else here and now
    (a thread hand-off costs more than small work)."""
    if not heavy:
        return work(*args, **kwargs)
    return await asyncio.to_thread(work, *args, **kwargs)
