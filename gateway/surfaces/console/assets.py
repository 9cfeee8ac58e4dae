"""The console's stylesheet and script under names that hold their content's hash
(docs/design.md §19): a browser keeps them for a year, and a new release names new
files, so a page is never styled by an old sheet."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from gateway.surfaces.console.guards import HEADERS

# The vendored htmx's SHA-384 (static/VENDORED.md): its <script> tag's integrity.
HTMX_INTEGRITY = "sha384-2OatzQy1H+Zd/IIrjr1TcuDGqLXeHhbooAyJY1KdQMKnr4LZ22k31GBLdYKHmVjg"
# What a page's headers say, but kept: immutable bytes under a name of their own.
ASSET_HEADERS = HEADERS | {"cache-control": "public, max-age=31536000, immutable"}
_FILES = (("css", "console.css", "text/css"), ("script", "htmx.min.js", "text/javascript"))


@dataclass(frozen=True)
class Assets:
    files: dict[str, tuple[bytes, str]]  # hashed name → content, media type
    urls: dict[str, str]  # "css", "script" → the hashed name

    @classmethod
    def of(cls, folder: Path) -> Assets:
        files, urls = {}, {}
        for role, name, media_type in _FILES:
            body = (folder / name).read_bytes()
            stem, _, suffix = name.partition(".")
            hashed = f"{stem}.{hashlib.sha256(body).hexdigest()[:16]}.{suffix}"
            files[hashed] = (body, media_type)
            urls[role] = hashed
        return cls(files, urls)

    def named(self, name: str) -> tuple[bytes, str] | None:
        return self.files.get(name)
