"""Reading configuration is bounded and loses nothing (issue 34 §4): a YAML alias bomb
is refused in well under a second (it grew memory by ~50 MB/s and never finished), a
FIFO or a device behind the path is refused at once (it blocked the reader for ever),
a file past the size cap is refused, anchors and merge keys within the budget still
work; and a change written while a reload runs is applied afterwards (the watcher took
it as seen), through the real watcher and a real reload."""

from __future__ import annotations

import asyncio
import os
import time
import tracemalloc
from pathlib import Path

import pytest
import yaml

from gateway import load_config
from gateway.errors import ConfigError
from gateway.runtime.runtimes import Reloaded, Runtimes
from gateway.runtime.services import Gateway
from gateway.runtime.watch import ConfigWatcher, applied
from tests.gateway.runtime.test_runtimes import CONFIG
from tool_registry import ToolConfigError, load_yaml, read_bounded

BOMB = "\n".join(
    ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
    + ["upstreams: *i"]
)


def test_an_alias_bomb_is_refused_at_once_in_little_memory(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(BOMB)
    tracemalloc.start()
    started = time.process_time()  # this process's CPU: another's load does not count
    with pytest.raises(ConfigError, match="aliases expand past"):
        load_config(path)
    elapsed = time.process_time() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert elapsed < 1.0
    assert peak < 20 * 1024 * 1024


def test_an_alias_that_holds_itself_is_refused() -> None:
    with pytest.raises(yaml.YAMLError, match="refers to the node that holds it"):
        load_yaml("a: &a [1, *a]")


def test_anchors_and_merge_keys_within_the_budget_still_work() -> None:
    text = """
defaults: &limits {max_iterations: 3, max_tool_calls: 5}
upstreams: [{name: u, base_url: "http://127.0.0.1:9/v1"}]
models: [{name: m, upstream: u}]
tenants:
  - {id: a, keys: [sk-aaaaaaaaaaaa], limits: *limits}
  - {id: b, keys: [sk-bbbbbbbbbbbb], limits: {<<: *limits, max_iterations: 2}}
"""
    assert load_yaml(text)["tenants"][1]["limits"] == {"max_iterations": 2, "max_tool_calls": 5}
    with pytest.raises(yaml.YAMLError):  # an alias to an anchor that is not there
        load_yaml("a: *missing")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_behind_the_path_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    link = tmp_path / "gateway.yaml"
    link.symlink_to(fifo)  # as a ConfigMap's symlink might point
    # Opening the FIFO would block for ever (it has no writer): being refused is the proof.
    with pytest.raises(ConfigError, match="not a regular file"):
        load_config(link)
    with pytest.raises(ToolConfigError, match="not a regular file"):
        read_bounded(Path("/dev/zero"))  # a device: endless bytes
    with pytest.raises(ToolConfigError, match="not a regular file"):
        read_bounded(tmp_path)


def test_a_file_past_the_cap_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(b"#" * 101)
    assert read_bounded(path, 101) == b"#" * 101
    with pytest.raises(ToolConfigError, match="larger than 100 bytes"):
        read_bounded(path, 100)


def test_what_a_reload_applied_is_the_state_it_started_from() -> None:
    before = (("gateway.yaml", "/real/a", (1, 10, 100)),)
    during = (("gateway.yaml", "/real/b", (2, 11, 200)), ("tools.yaml", "/t", (3, 1, 1)))
    assert applied(before, during) == (
        ("gateway.yaml", "/real/a", (1, 10, 100)),  # as the reload found it: a change
        ("tools.yaml", "/t", None),  # newly taken in: unread, so looked at again
    )


class WrittenDuringReload(Runtimes):
    """A real reload, with the next edit of the file landing while it runs (as a
    ConfigMap update that comes while a slow reload waits on a remote source)."""

    next_text: str | None = None
    next_path: Path | None = None  # the file it lands in: the configuration's, or another

    async def reload(self, every_worker: bool = False) -> Reloaded:
        text, self.next_text = self.next_text, None
        if text is None:
            return await super().reload(every_worker)
        result = await super().reload(every_worker)
        assert self.config_path is not None
        await asyncio.sleep(0.05)
        target = self.next_path or Path(self.config_path)
        await asyncio.to_thread(target.write_text, text)  # lands before the next look
        return result


@pytest.mark.anyio
async def test_a_change_written_during_a_reload_is_applied(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    made = Gateway(load_config(path), config_path=path)
    runtimes = WrittenDuringReload(made.config, made.metrics, made.redactor, path)
    watcher = ConfigWatcher(runtimes, path, interval_s=0.05)
    seen = await watcher.start()
    task = asyncio.create_task(watcher.run(seen))
    try:
        revoked = {**CONFIG, "tools": [{"name": "t2", "http": {"url": "http://127.0.0.1:9/t2"}}]}
        runtimes.next_text = yaml.safe_dump({**CONFIG, "tools": []})  # the later change
        path.write_text(yaml.safe_dump(revoked))
        for _ in range(100):
            await asyncio.sleep(0.05)
            if runtimes.next_text is None and "t2" not in runtimes.current.registry:
                break
        assert "t1" not in runtimes.current.registry
        assert "t2" not in runtimes.current.registry  # the change during the reload: applied
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@pytest.mark.anyio
async def test_a_tool_file_that_appears_during_a_reload_is_taken_in(tmp_path: Path) -> None:
    """The reload took in a glob's files; one more matched after it read them: it is
    not taken for read (it was, the old way), so its tools come in."""
    (tmp_path / "tools").mkdir()
    first = {"tools": [{"name": "t2", "http": {"url": "http://127.0.0.1:9/t2"}}]}
    (tmp_path / "tools" / "a.yaml").write_text(yaml.safe_dump(first))
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    made = Gateway(load_config(path), config_path=path)
    runtimes = WrittenDuringReload(made.config, made.metrics, made.redactor, path)
    watcher = ConfigWatcher(runtimes, path, interval_s=0.05)
    task = asyncio.create_task(watcher.run(await watcher.start()))
    try:
        runtimes.next_path = tmp_path / "tools" / "b.yaml"
        late = {"tools": [{"name": "t3", "http": {"url": "http://127.0.0.1:9/t3"}}]}
        runtimes.next_text = yaml.safe_dump(late)
        path.write_text(yaml.safe_dump({**CONFIG, "tool_files": ["tools/*.yaml"]}))
        for _ in range(100):
            await asyncio.sleep(0.05)
            if "t3" in runtimes.current.registry:
                break
        assert {"t2", "t3"} <= set(runtimes.current.registry.names)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
