"""The streaming driver of the loop engine (docs/design.md §7, §10): the events of every
choice's loop as they come — content deltas at once, server tool-call deltas never —
with a beat while work runs (tools, or a turn being kept) so that a surface can send
keep-alive comments, and the choices of a request with ``n`` interleaved. A surface
encodes what it yields; the engine writes no byte of any wire format."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import anyio

from gateway.engine.loop import Final, HandBack, Run, ToolLoop, Working
from gateway.errors import GatewayError
from gateway.values import ChoiceDelta
from tool_registry import immutable


@immutable
class Beat:
    """Work is under way (tools running): it has started (``alive`` False), or it
    still runs ``keepalive_s`` later (``alive`` True: time for a keep-alive)."""

    alive: bool


Streamed = ChoiceDelta | Beat | HandBack | Final
Choice = tuple[int, Streamed]  # which choice of the request an event is of, and it


async def stream_events(loop: ToolLoop, runs: list[Run]) -> AsyncIterator[Choice]:
    """One loop per choice, their events as they come, ending when every loop has
    ended; the first failure ends them all and is raised (``Run.mark_failure`` has
    marked it)."""
    try:
        if len(runs) == 1:
            async for event in _rounds(loop, runs[0]):
                yield 0, event
            return
        async for choice in _choices(loop, runs):
            yield choice
    except GatewayError as exc:
        runs[0].mark_failure(exc)
        raise


_END = object()


async def _choices(loop: ToolLoop, runs: list[Run]) -> AsyncIterator[Choice]:
    """Every choice's loop at once, their events interleaved as they come; the first
    failure ends them all."""
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=64)

    async def pump(index: int, run: Run) -> None:
        try:
            async for event in _rounds(loop, run):
                await queue.put((index, event))
            await queue.put(_END)
        except Exception as exc:  # handed to the reader, which raises it
            await queue.put(exc)

    tasks = [asyncio.create_task(pump(index, run)) for index, run in enumerate(runs)]
    try:
        running = len(tasks)
        while running:
            item = await queue.get()
            if item is _END:
                running -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.gather(*tasks, return_exceptions=True)


async def _rounds(loop: ToolLoop, run: Run) -> AsyncIterator[Streamed]:
    """The streaming driver of one choice: its events, its work run with beats."""
    async for event in run.events(stream=True):
        if isinstance(event, Working):
            yield Beat(alive=False)
            async for beat in _keeping_alive(event.start(), loop.keepalive_s):
                yield beat
            continue
        yield event


async def _keeping_alive(
    work: Coroutine[Any, Any, None], keepalive_s: float
) -> AsyncIterator[Beat]:
    """Run ``work`` (the round's tools), with a beat every ``keepalive_s``."""
    task = asyncio.create_task(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=keepalive_s)
            if done:
                break
            yield Beat(alive=True)
    finally:
        if not task.done():
            task.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.gather(task, return_exceptions=True)
    task.result()
