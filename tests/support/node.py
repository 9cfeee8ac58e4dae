"""Node.js and the packages of ``tests/node`` (installed by ``make test`` from its lock
file): the openai Node SDK, Codex CLI, and the OpenID provider of the browser tests."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).resolve().parent.parent / "node"


def node(package: str = "openai") -> str:
    """The ``node`` executable, where ``package`` is installed in ``tests/node``; else
    the test fails saying what to install (a skip only if asked)."""
    found = shutil.which("node")
    if found is None or not (NODE_DIR / "node_modules" / package).exists():
        if os.environ.get("TOOLGATE_SKIP_NODE") == "1":
            pytest.skip("TOOLGATE_SKIP_NODE=1")
        pytest.fail(
            f"Node.js and tests/node's packages ({package}) are needed: install Node.js "
            "20+, then run `npm ci --prefix tests/node` (make test does), or set "
            "TOOLGATE_SKIP_NODE=1."
        )
    return found
