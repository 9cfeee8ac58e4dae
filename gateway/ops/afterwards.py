"""Writes an answer does not wait for (docs/performance.md): a request's trace, its
recording and its row in the runs list are kept after its answer is sent, by one
worker, in the order they came.

- **Bounded**: at most ``limit`` writes wait, holding at most ``max_bytes`` of what
  they keep (a recording holds its whole request). Past either, a write is done on
  its request's own path, as before: nothing is dropped, and a store that has fallen
  behind slows the requests instead of filling the memory.
- **Read your own writes**: ``settled()`` waits until every write submitted so far is
  done. The reads of what these writes keep (a trace, the runs list, the recordings)
  wait for it first, so a run is there once its answer has arrived, on this replica.
  Another replica sees it a few milliseconds later, as any store write.
- **Drained on shutdown**: ``aclose()`` takes no new write into the queue (it is done
  at once instead), waits for those queued, then stops the worker.
- **Tried again**: a write the store did not take (``StoreUnavailable``: a call that
  passed ``store.timeout_s`` on a busy host, or a store skipped since one did) is tried
  again after ``RETRY_PAUSES_S``, 1.75 s in all, past the store's cooldown. Meanwhile
  the writes behind it wait in the queue; a write done on its request's path (the
  queue full) is tried once.
- A write that fails for good is logged, never raised: its request was answered already.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from gateway.errors import StoreUnavailable

logger = logging.getLogger("gateway.afterwards")

Write = Callable[[], Awaitable[object]]  # what it returns is not read
LIMIT = 1024  # writes waiting at most
RETRY_PAUSES_S = (0.25, 0.5, 1.0)  # before each new try of a write the store did not take
SETTLE_S = 5.0  # a read waits for the writes before it this long at most
MAX_BYTES = 64 * 1024 * 1024  # of what they hold (the request bodies they record)


class Afterwards:
    def __init__(
        self,
        limit: int = LIMIT,
        max_bytes: int = MAX_BYTES,
        retry_pauses_s: tuple[float, ...] = RETRY_PAUSES_S,
        settle_s: float = SETTLE_S,
    ) -> None:
        self._retry_pauses_s = retry_pauses_s
        self._settle_s = settle_s
        self._closing = asyncio.Event()  # set by aclose: no more pauses before a new try
        self._queue: asyncio.Queue[tuple[Write, int]] = asyncio.Queue(limit)
        self._max_bytes = max_bytes
        self._bytes = 0  # held by the writes waiting
        self._worker: asyncio.Task[None] | None = None
        self._queued = 0  # writes queued so far
        self._done = 0  # of those, done (in the order they were queued)
        self._progress = asyncio.Condition()
        self._readers = 0  # waiting in ``settled()``: told of each write done, none else
        self._stopped = False  # its worker has ended
        self.inline = 0  # writes done on their request's path (the queue was full)

    def start(self) -> None:
        """Take writes from here (in the running event loop)."""
        if self._worker is None:
            self._worker = asyncio.create_task(self._drain(), name="writes after answers")

    async def submit(self, write: Write, size: int = 0) -> None:
        """Queue ``write`` (holding ``size`` bytes until done); done at once where
        there is no worker, or no room."""
        if self._worker is not None and not self._worker.done():
            if self._bytes + size <= self._max_bytes:
                try:
                    self._queue.put_nowait((write, size))
                except asyncio.QueueFull:
                    pass
                else:
                    self._queued += 1
                    self._bytes += size
                    return
            self.inline += 1
        await _done(write)

    async def settled(self) -> None:
        """Wait until every write submitted so far is done (not those submitted while
        it waits: a steady stream of answers never keeps a reader waiting), at most
        ``SETTLE_S``: writes tried again while the store is down must not hold a read
        for their whole queue (the read then finds what there is)."""
        until = self._queued
        if self._done >= until or self._stopped:
            return
        self._readers += 1  # before any await: no write is done unseen in between
        try:
            async with asyncio.timeout(self._settle_s), self._progress:
                await self._progress.wait_for(lambda: self._done >= until or self._stopped)
        except TimeoutError:
            logger.warning("a read went ahead before the writes it waited for were done")
        finally:
            self._readers -= 1

    async def aclose(self) -> None:
        worker, self._worker = self._worker, None  # new writes are done at once from here
        if worker is None:
            return
        self._closing.set()  # the queue drains with one try each: a down store holds no exit
        if not worker.done():  # a worker stopped some other way drains nothing more
            await self._queue.join()
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker

    async def _drain(self) -> None:
        try:
            await self._take()
        finally:  # stopped: nothing more will be done, so no reader waits for it
            self._stopped = True
            async with self._progress:
                self._progress.notify_all()

    async def _take(self) -> None:
        while True:
            write, size = await self._queue.get()
            try:
                await _done(write, self._retry_pauses_s, self._closing)
            finally:
                self._queue.task_done()
                self._done += 1
                self._bytes -= size
                if self._readers:  # most writes have none waiting
                    async with self._progress:
                        self._progress.notify_all()


async def _done(
    write: Write, pauses: tuple[float, ...] = (), closing: asyncio.Event | None = None
) -> None:
    """``write`` done, tried again after each of ``pauses`` while the store is
    unavailable, unless ``closing`` is set (then it has one more try, at once)."""
    for pause in (*pauses, None):
        try:
            await write()
        except StoreUnavailable:
            if pause is None or (closing is not None and closing.is_set()):
                logger.warning("a write after an answer was not kept: store unavailable")
                return
            if closing is None:
                await asyncio.sleep(pause)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(closing.wait(), pause)
        except Exception:
            logger.exception("a write after an answer failed; the answer was sent")
            return
        else:
            return
