"""Writes an answer does not wait for (issue 53 §2): queued, done in order by one worker;
``settled()`` waits for those submitted before it (not those after); bounded (past the
limit a write is done on its request's path, never dropped); drained on close; a
failing write is logged, never raised."""

from __future__ import annotations

import asyncio
import logging
from functools import partial

import pytest

from gateway.errors import StoreUnavailable
from gateway.ops.afterwards import Afterwards

pytestmark = pytest.mark.anyio

BOUND_S = 5  # a read that waits longer was never told its writes were done


async def settled(later: Afterwards) -> None:
    """``later.settled()``, failing rather than hanging where a reader is never let go."""
    await asyncio.wait_for(later.settled(), BOUND_S)


class Gated:
    """Writes that wait for a gate, and the order they were done in."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.done: list[int] = []

    async def write(self, n: int) -> None:
        await self.gate.wait()
        self.done.append(n)


async def _queued(count: int) -> tuple[Afterwards, Gated]:
    later, gated = Afterwards(), Gated()
    later.start()
    for n in range(count):
        await later.submit(partial(gated.write, n))  # returns at once: the gate is shut
    return later, gated


async def test_writes_wait_for_no_answer_and_reads_wait_for_them() -> None:
    later, gated = await _queued(3)
    assert gated.done == []
    reader = asyncio.ensure_future(later.settled())
    await asyncio.sleep(0)
    assert not reader.done()  # a read waits for the writes before it
    gated.gate.set()
    await asyncio.wait_for(reader, BOUND_S)
    assert gated.done == [0, 1, 2]  # in the order they came
    await later.aclose()


async def test_a_reader_does_not_wait_for_writes_submitted_after_it() -> None:
    later = Afterwards()
    later.start()
    first, second = asyncio.Event(), asyncio.Event()
    await later.submit(first.wait)
    reader = asyncio.ensure_future(later.settled())
    await asyncio.sleep(0)  # the read begins
    await later.submit(second.wait)  # came after the read began
    first.set()
    await asyncio.wait_for(reader, BOUND_S)  # done without the second
    second.set()
    await later.aclose()


async def test_readers_waiting_at_once_are_each_let_go_at_their_own_write() -> None:
    """The worker tells readers of each write done only while one waits: a reader
    that comes after writes were done unseen still waits for its own."""
    later = Afterwards()
    later.start()
    gates = [asyncio.Event() for _ in range(3)]
    await later.submit(gates[0].wait)
    gates[0].set()
    await settled(later)  # done with no reader waiting: nothing told
    await later.submit(gates[1].wait)
    early = asyncio.ensure_future(later.settled())
    await asyncio.sleep(0)  # the first read begins
    await later.submit(gates[2].wait)
    late = asyncio.ensure_future(later.settled())
    await asyncio.sleep(0)  # and the second
    assert not early.done()
    assert not late.done()
    gates[1].set()
    await asyncio.wait_for(early, BOUND_S)
    await asyncio.sleep(0)
    assert not late.done()  # its write is still to come
    gates[2].set()
    await asyncio.wait_for(late, BOUND_S)
    await later.aclose()


async def test_past_its_bound_a_write_is_done_on_its_own_path() -> None:
    later = Afterwards(limit=1)
    later.start()
    gate, taken, done = asyncio.Event(), asyncio.Event(), []

    async def held() -> None:
        taken.set()
        await gate.wait()
        done.append("held")

    async def quick(name: str) -> None:
        done.append(name)

    await later.submit(held)  # the worker takes it and waits
    await taken.wait()  # the worker has taken it: the queue is empty
    await later.submit(lambda: quick("queued"))  # fills the one place
    await later.submit(lambda: quick("inline"))  # no room: done now, not dropped
    assert done == ["inline"]
    assert later.inline == 1
    gate.set()
    await settled(later)
    assert done == ["inline", "held", "queued"]
    await later.aclose()


async def test_close_drains_every_queued_write_and_then_writes_inline() -> None:
    later, gated = await _queued(5)
    closing = asyncio.ensure_future(later.aclose())
    await asyncio.sleep(0)
    assert not closing.done()  # it waits for them
    gated.gate.set()
    await closing
    assert gated.done == [0, 1, 2, 3, 4]
    await later.submit(partial(gated.write, 5))  # after close: done at once
    assert gated.done[-1] == 5


async def test_a_failing_write_is_logged_and_the_next_still_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    later = Afterwards()
    later.start()
    done = []

    async def broken() -> None:
        raise RuntimeError("store down")

    async def fine() -> None:
        done.append("fine")

    await later.submit(broken)
    await later.submit(fine)
    with caplog.at_level(logging.ERROR, logger="gateway.afterwards"):
        await settled(later)
    assert done == ["fine"]
    assert "a write after an answer failed" in caplog.text
    await later.aclose()


async def test_writes_holding_too_much_are_done_on_their_own_path() -> None:
    """A recording holds its whole request: past ``max_bytes`` waiting, a write is
    done at once, and the bytes are given back as writes finish."""
    later, gated = Afterwards(max_bytes=100), Gated()
    later.start()
    await later.submit(partial(gated.write, 0), 60)  # waits at the gate, holding 60
    done: list[str] = []

    async def big() -> None:
        done.append("big")

    await later.submit(big, 50)  # 110 > 100: not queued, done now
    assert done == ["big"]
    assert later.inline == 1
    gated.gate.set()
    await settled(later)
    await later.submit(big, 50)  # the 60 were given back: queued again
    await settled(later)
    assert done == ["big", "big"]
    assert later.inline == 1
    await later.aclose()


async def test_a_reader_is_let_go_when_the_worker_stops_without_a_close() -> None:
    later, gated = await _queued(2)
    reader = asyncio.ensure_future(later.settled())
    await asyncio.sleep(0)
    assert later._worker is not None
    later._worker.cancel()  # the loop torn down around it, say
    await asyncio.wait_for(reader, BOUND_S)  # not left waiting for writes that will not come
    assert gated.done == []
    await asyncio.wait_for(later.aclose(), BOUND_S)  # nor is a close


class Flaky:
    """A write the store refuses ``refusals`` times (a call past its timeout, a store
    skipped since), then takes."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.tries = 0
        self.kept = False

    async def write(self) -> None:
        self.tries += 1
        if self.tries <= self.refusals:
            raise StoreUnavailable("The shared store is unavailable.")
        self.kept = True


async def test_a_write_the_store_did_not_take_is_tried_again_and_read_after() -> None:
    later = Afterwards(retry_pauses_s=(0.01, 0.01, 0.01))
    later.start()
    flaky = Flaky(refusals=2)
    await later.submit(flaky.write)
    await settled(later)  # a read waits for the write's last try
    assert (flaky.tries, flaky.kept) == (3, True)
    await later.aclose()


async def test_a_write_the_store_never_takes_is_logged_after_its_tries(
    caplog: pytest.LogCaptureFixture,
) -> None:
    later = Afterwards(retry_pauses_s=(0.01, 0.01))
    later.start()
    never, after = Flaky(refusals=99), Flaky(refusals=0)
    await later.submit(never.write)
    await later.submit(after.write)
    with caplog.at_level(logging.WARNING, logger="gateway.afterwards"):
        await settled(later)
    assert (never.tries, never.kept) == (3, False)
    assert after.kept
    assert "not kept: store unavailable" in caplog.text
    await later.aclose()


async def test_a_write_on_its_requests_path_is_tried_once() -> None:
    """No worker (or no room): the request's own path waits for no pause."""
    flaky = Flaky(refusals=1)
    await Afterwards(retry_pauses_s=(0.01,)).submit(flaky.write)
    assert (flaky.tries, flaky.kept) == (1, False)


async def test_a_read_waits_for_writes_tried_again_only_so_long() -> None:
    """While the store is down, writes wait in the queue for their next tries: a read
    goes ahead after ``settle_s`` rather than waiting for all of them."""
    later = Afterwards(retry_pauses_s=(30.0,), settle_s=0.05)
    later.start()
    never = Flaky(refusals=99)
    await later.submit(never.write)
    await settled(later)  # bounded by BOUND_S: fails instead of hanging if unbounded
    assert never.tries == 1  # still waiting for its next try
    # Closing ends its pause: one more try at once, and a down store holds no exit.
    await asyncio.wait_for(later.aclose(), BOUND_S)
    assert never.tries == 2
