"""How many bytes of large request bodies one process holds at once
(``server.large_bodies_held_bytes``). A body past ``server.large_body_bytes`` is
decoded into several times its size in objects, kept for its whole request (every
round resends it); past the limit, the next one is a 503 the client retries, not
memory the process does not have."""

from __future__ import annotations

from collections.abc import Callable

from gateway.errors import Overloaded
from gateway.ops.metrics import Metrics

RETRY_AFTER_S = 1


class LargeBodies:
    """The bytes of large bodies held now, by requests not yet answered."""

    __slots__ = ("_metrics", "held")

    def __init__(self, metrics: Metrics | None = None) -> None:
        self._metrics = metrics
        self.held = 0

    def hold(self, size: int, limit: int) -> Callable[[], None]:
        """Hold ``size`` bytes, or raise ``Overloaded`` if more than ``limit`` would be
        held; the release it returns gives them back (once, however often called)."""
        if self.held + size > limit:
            raise Overloaded(
                f"The gateway is holding as many large request bodies as it may; "
                f"retry in {RETRY_AFTER_S}s.",
                headers={"retry-after": str(RETRY_AFTER_S)},
            )
        self._add(size)
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._add(-size)

        return release

    def _add(self, size: int) -> None:
        self.held += size
        if self._metrics is not None:
            self._metrics.large_body_bytes.inc(size)
