"""The start-up probe's lines (``runtime/probe.py``): bounded whatever the catalog."""

from __future__ import annotations

import logging

import bm25s  # noqa: F401  (it sets its logger's level when imported)
import pytest

from gateway import GatewayConfig
from gateway.ops.logs import JsonFormatter, configure_logging
from gateway.runtime.probe import announce, named
from gateway.runtime.services import Gateway
from tests.support.scripted import config, tool


def test_a_probe_names_a_few_tools_and_counts_the_rest() -> None:
    assert named(["a", "b"]) == "a, b"
    assert named([f"t{i}" for i in range(1500)]) == "t0, t1, t2, t3, t4 and 1,495 more"


@pytest.mark.anyio
async def test_a_catalog_of_thousands_behind_one_origin_is_a_short_start_up_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway")
    tools = [
        tool(f"tool_with_a_long_name_{i:04d}", f"http://127.0.0.1:9/t{i}") for i in range(1500)
    ]
    gateway = Gateway(GatewayConfig.model_validate(config("http://127.0.0.1:9", tools)))
    async with gateway:
        await announce(gateway, "http://127.0.0.1:8080/v1")
    lines = [JsonFormatter().format(r) for r in caplog.records if "tools" in r.getMessage()]
    assert lines
    assert max(len(line) for line in lines) < 1000


def test_the_log_is_no_more_verbose_than_its_level_whatever_a_library_sets() -> None:
    """bm25s sets its own logger to DEBUG when imported: its lines stay out of an info
    log (the handler holds the level too)."""
    assert logging.getLogger("bm25s").level == logging.DEBUG  # what bm25s did
    names = ["", "uvicorn", "uvicorn.error", "httpx", "httpx2", "mcp", "bm25s"]
    loggers = [logging.getLogger(name) for name in names]
    saved = [(each.handlers[:], each.level, each.propagate) for each in loggers]
    try:
        configure_logging("info")
        [handler] = logging.getLogger().handlers
        assert handler.level == logging.INFO
        assert logging.getLogger("bm25s").getEffectiveLevel() > logging.DEBUG
    finally:
        for each, (handlers, level, propagate) in zip(loggers, saved, strict=True):
            each.handlers[:] = handlers
            each.setLevel(level)
            each.propagate = propagate
