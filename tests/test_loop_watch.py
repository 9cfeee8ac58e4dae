"""The event-loop stall watch the hostile-input tests rely on (``tests/support/hostile.py``):
it catches a loop that blocks, a loop busy with its own work and another thread holding
the GIL, and mistakes neither a crowded machine nor a collection of the test process's
heap for any of them."""

from __future__ import annotations

import asyncio
import gc
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from starlette.applications import Starlette

from tests.support.hostile import LoopWatch
from tests.support.servers import ServerThread

STALL_S = 0.25


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with ServerThread(Starlette()) as started:
        yield started


def _on_the_loop(server: ServerThread, work: object) -> None:
    async def run() -> None:
        assert callable(work)
        work()

    server.call(run)


def _idle(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_loop_that_blocks_is_caught(server: ServerThread) -> None:
    with LoopWatch(server) as watch:
        _idle(0.05)
        _on_the_loop(server, lambda: time.sleep(STALL_S))
        _idle(0.05)
    assert watch.longest >= STALL_S * 0.8, watch.longest


def test_a_loop_busy_with_its_own_work_is_caught(server: ServerThread) -> None:
    def spin() -> None:  # STALL_S of the loop thread's own CPU time, however crowded
        ends = time.thread_time() + STALL_S
        while time.thread_time() < ends:
            pass

    with LoopWatch(server) as watch:
        _idle(0.05)
        _on_the_loop(server, spin)
        _idle(0.05)
    assert watch.longest >= STALL_S * 0.8, watch.longest


def test_another_thread_holding_the_gil_is_caught(server: ServerThread) -> None:
    """A regular expression backtracking in C holds the GIL the whole time."""

    spent: list[float] = []

    def backtrack() -> None:  # its own CPU time: what it held the GIL for, however crowded
        started = time.thread_time()
        re.match(r"(a+)+$", "a" * 23 + "b")
        spent.append(time.thread_time() - started)

    with LoopWatch(server) as watch:
        _idle(0.05)
        held = threading.Thread(target=backtrack)
        held.start()
        held.join()
        _idle(0.05)
    [took] = spent
    assert took > 0.1  # it did hold the GIL a while
    assert watch.longest >= took * 0.5, (watch.longest, took)


def test_a_full_collection_walks_only_what_was_made_while_watched(server: ServerThread) -> None:
    """A full collection of the test process's heap is not the gateway's pause: what
    lived when the watch began is frozen out of the collector's walks (as ``toolgate
    serve`` freezes its start-up heap), while what is made meanwhile is still walked.
    Times are the collecting thread's own CPU time: their ratio holds on any machine."""
    heap = [[index, []] for index in range(400_000)]  # a large heap, as pytest's grows
    started = time.thread_time()
    gc.collect()
    walking_it = time.thread_time() - started
    spent: list[float] = []

    def collect() -> None:
        started = time.thread_time()
        gc.collect()
        spent.append(time.thread_time() - started)

    with LoopWatch(server) as watch:
        _idle(0.05)
        _on_the_loop(server, collect)
        _idle(0.05)
    [walking_what_is_new] = spent
    assert walking_what_is_new < walking_it / 10, (walking_what_is_new, walking_it)
    assert watch.longest < 0.1, watch.longest
    assert not gc.get_freeze_count()  # thawed once the watch ends
    del heap


def test_a_crowded_machine_is_not_a_stall(server: ServerThread) -> None:
    """Four processes spinning on two cores for a second, and a thread of this process
    busy in Python (as the tests' fake servers are): the loop waits for a CPU and takes
    its turns at the GIL, neither of which is the gateway's doing."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(4)]
    done = threading.Event()

    def busy() -> None:
        while not done.is_set():
            sum(range(1000))

    worker = threading.Thread(target=busy)
    try:
        worker.start()
        with LoopWatch(server) as watch:
            _idle(1.0)
    finally:
        done.set()
        worker.join()
        for hog in hogs:
            hog.kill()
            hog.wait()
    # Below the 0.2 s the stall tests above must see, with room: beside a second copy of
    # the suite on two cores, a gap's unexplained share (the turns at the GIL a crowded
    # scheduler stretches) reached 0.127 s.
    assert watch.longest < 0.16, watch.longest


def test_the_watch_runs_on_the_servers_loop(server: ServerThread) -> None:
    async def running() -> bool:
        return asyncio.get_running_loop().is_running()

    assert server.call(running)
