"""One deadline for a series of waits, on one loop timer (docs/performance.md, "One
timer for a run's deadline").

A run waits many times within the same deadline: each upstream round, each chunk of a
streamed one. ``asyncio.timeout_at`` around each wait makes and cancels a timer and a
context object every time (about 9 µs here, a third of it the timer). A ``Deadline``
arms one timer at its first wait and keeps it until ``close``; each ``within`` only
notes which task waits. Each wait has ``asyncio.timeout_at``'s meaning: ``TimeoutError``
if the deadline passes during it, and a cancellation from elsewhere (the client
leaving, a task group failing) is never taken for the deadline's own. A wait begun
after the deadline passed is bounded by ``asyncio.timeout_at`` itself, as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")


class Deadline:
    __slots__ = ("_cancelling", "_handle", "_hit", "_task", "when")

    def __init__(self, when: float) -> None:
        self.when = when  # on the event loop's clock
        self._handle: asyncio.TimerHandle | None = None  # armed, not yet fired
        self._task: asyncio.Task[Any] | None = None  # the task waiting within it now
        self._cancelling = 0  # that task's cancel requests when its wait began
        self._hit = False  # the timer cancelled the wait in progress

    async def within(self, awaitable: Awaitable[T]) -> T:
        """``await awaitable``; ``TimeoutError`` if the deadline passes meanwhile."""
        loop = asyncio.get_running_loop()
        if self._handle is None and loop.time() >= self.when:  # passed: fired, or too late to arm
            async with asyncio.timeout_at(self.when):
                return await awaitable
        task = asyncio.current_task()
        if task is None or self._task is not None:
            raise RuntimeError("a Deadline is waited within by one task at a time")
        if self._handle is None:
            self._handle = loop.call_at(self.when, self._expire)
        self._task, self._cancelling = task, task.cancelling()
        try:
            result = await awaitable
        except asyncio.CancelledError as exc:
            if self._taken_back(task) <= self._cancelling:
                raise TimeoutError from exc
            raise
        except BaseException:
            self._taken_back(task)
            raise
        self._taken_back(task)
        return result

    def _taken_back(self, task: asyncio.Task[Any]) -> int:
        """The wait is over: the deadline's cancel, if it made one, is taken back (as
        ``asyncio.timeout_at`` does). The task's cancel requests left, or a number past
        any when the deadline made none."""
        self._task = None
        if not self._hit:
            return self._cancelling + 1  # never the deadline's: a cancel stays a cancel
        self._hit = False
        return task.uncancel()

    def _expire(self) -> None:
        self._handle = None
        task = self._task
        if task is not None:
            task.cancel()
            self._hit = True

    def close(self) -> None:
        """No more waits: the timer goes."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
