"""Reloading when the configuration's files change (``server.watch_config``, docs/design.md
§14).

The watched files are the configuration file and what it takes in: the files its
``tool_files`` globs match (a file appearing or going counts) and its local OpenAPI
documents. Each is polled every ``server.watch_interval_s``: its real path and its
inode, size and modification time. A Kubernetes ConfigMap mounted as a volume changes
by a symlink swap (``..data`` moves to a new folder), which changes the real path and
the inode; an editor's save changes the time or the inode. A change seen twice in a
row (the file has settled) reloads exactly as ``SIGHUP`` does: the new file is read
and built whole before anything is swapped, and a file that does not load keeps the
old snapshot, says why in the log and counts
``toolgate_config_reloads_total{result="error"}``; the next change is tried again. A
change written while a reload runs is seen afterwards and reloads again (``applied``);
reading is bounded in time and memory (``tool_registry.sources.files``, and
``runtimes.READ_TIMEOUT_S``).

Polling, not inotify: it needs no dependency, sees a ConfigMap's swap the same way on
every filesystem, and costs a few ``stat`` calls per interval, made off the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path

from gateway.config import GatewayConfig
from gateway.runtime.loader import tool_files
from gateway.runtime.runtimes import Runtimes

logger = logging.getLogger("gateway.runtime")

# Per file: its real path and (inode, size, modification time in ns); None if missing.
Fingerprint = tuple[tuple[str, str, tuple[int, int, int] | None], ...]


def watched_files(path: Path, config: GatewayConfig) -> list[Path]:
    """The configuration file and the local files it takes in, as it names them now."""
    files = [path]
    for pattern in config.tool_files:
        files += tool_files(path, pattern)
    files += [Path(source.spec) for source in config.openapi if not source.is_url]
    return files


def fingerprint(files: list[Path]) -> Fingerprint:
    """What a change to any of ``files`` changes (blocking: a few ``stat`` calls)."""
    found: list[tuple[str, str, tuple[int, int, int] | None]] = []
    for file in files:
        try:
            real = os.path.realpath(file)
            stat = os.stat(real)
        except OSError:
            found.append((str(file), "", None))
            continue
        found.append((str(file), real, (stat.st_ino, stat.st_size, stat.st_mtime_ns)))
    return tuple(found)


def applied(before: Fingerprint, after: Fingerprint) -> Fingerprint:
    """What a reload that started at ``before`` is known to have read: the files it
    takes in now (``after``), each as it was when the reload started. A file written
    while the reload ran differs from this, so the next look sees it and reloads
    again: a change is never taken for applied because it came during a reload. A
    file the reload newly took in is taken as unread (it may have appeared after the
    reload read the others), which costs at most one more reload."""
    then = {name: (real, stat) for name, real, stat in before}
    return tuple((name, *then.get(name, (real, None))) for name, real, _ in after)


class ConfigWatcher:
    """Polls the configuration's files and reloads when they change."""

    def __init__(self, runtimes: Runtimes, path: Path, interval_s: float) -> None:
        self._runtimes = runtimes
        self._path = path
        self._interval_s = interval_s

    def _look(self) -> Fingerprint:
        return fingerprint(watched_files(self._path, self._runtimes.current.config))

    async def start(self) -> Fingerprint:
        """What the files are now: the state changes are seen against."""
        return await asyncio.to_thread(self._look)

    async def run(self, seen: Fingerprint) -> None:
        changed: Fingerprint | None = None
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                now = await asyncio.to_thread(self._look)
                if now == seen:
                    changed = None
                    continue
                if now != changed:  # seen once: wait one interval for it to settle
                    changed = now
                    continue
                logger.info("configuration files changed: reloading")
                await self._runtimes.reload(every_worker=True)
                after = await asyncio.to_thread(self._look)  # the new file may take in others
                seen = applied(now, after)
                changed = None
            except Exception:  # the watcher outlives whatever one look or reload met
                logger.exception("watching the configuration files failed; still watching")


@contextlib.asynccontextmanager
async def watching(runtimes: Runtimes, interval_s: float) -> AsyncIterator[ConfigWatcher | None]:
    """While the block runs, changes to the configuration's files reload it (None when
    the gateway was not started from a file)."""
    if runtimes.config_path is None:
        yield None
        return
    watcher = ConfigWatcher(runtimes, Path(runtimes.config_path), interval_s)
    seen = await watcher.start()  # before the app serves: no change goes unseen
    task = asyncio.create_task(watcher.run(seen), name="config watcher")
    try:
        yield watcher
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
