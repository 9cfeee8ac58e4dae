"""A TCP proxy on loopback in front of a real server (Redis), which holds every reply
for a while on cue: a store that is slow, as a busy host makes it, when a test says so."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time

from tests.support.servers import WAIT_S


class SlowProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target``; after ``stall(seconds)``, a reply
    read from the target within that window reaches its client only once the window
    ends. Requests are never held: the target does the work at once, its answer is late."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._until = 0.0  # monotonic: replies read before this wait until it
        self._cue: asyncio.Event | None = None  # set on the proxy's loop at each new cue
        self._loop = asyncio.new_event_loop()
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen()
        self.port: int = self._listener.getsockname()[1]
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def stall(self, seconds: float) -> None:
        """Replies are late from now for ``seconds``."""
        self._until = time.monotonic() + seconds
        if self._cue is not None:
            self._loop.call_soon_threadsafe(self._cue.set)

    def __enter__(self) -> SlowProxy:
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        started.result(timeout=WAIT_S)
        return self

    def __exit__(self, *exc_info: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=WAIT_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=WAIT_S)
        self._loop.close()

    async def _start(self) -> None:
        self._cue = asyncio.Event()
        self._server = await asyncio.start_server(self._connection, sock=self._listener)

    async def _stop(self) -> None:
        assert self._server is not None
        self._server.close()
        tasks = asyncio.all_tasks() - {asyncio.current_task()}
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            target_reader, target_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        pumps = [
            asyncio.ensure_future(self._pump(reader, target_writer, late=False)),
            asyncio.ensure_future(self._pump(target_reader, writer, late=True)),
        ]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            for closing in (writer, target_writer):
                closing.close()
                with contextlib.suppress(OSError, asyncio.CancelledError):
                    await closing.wait_closed()

    async def _stall_over(self) -> None:
        """Until the stall in force ends (a new cue, set on this loop, is seen at once:
        the event is cleared before the stall is read, with no await between)."""
        assert self._cue is not None
        while True:
            self._cue.clear()
            left = self._until - time.monotonic()
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._cue.wait(), left)

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, late: bool
    ) -> None:
        with contextlib.suppress(OSError):
            while chunk := await source.read(65536):
                if late:
                    await self._stall_over()
                sink.write(chunk)
                await sink.drain()
