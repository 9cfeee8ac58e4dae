"""The serving process's collector settings."""

from __future__ import annotations

import subprocess
import sys


def test_tune_gc_freezes_the_start_up_heap_and_raises_the_thresholds() -> None:
    # In a child process: freezing this test process's heap would outlive the test.
    code = (
        "import gc; from gateway.ops.gc_tuning import THRESHOLDS, tune_gc; "
        "before = gc.get_freeze_count(); tune_gc(); "
        "assert gc.get_freeze_count() > before + 1000, gc.get_freeze_count(); "
        "assert gc.get_threshold() == THRESHOLDS; print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "ok", done.stderr
