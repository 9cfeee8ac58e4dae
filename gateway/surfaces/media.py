"""The media checks every surface makes of what a client sends as base64 (an image, a
document): the same on each, so none forwards what another refuses (docs/clients.md)."""

from __future__ import annotations

import base64
import binascii

# What the first bytes of a kind of media are: its type read from them, never trusted
# from a label.
MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"RIFF", "image/webp"),  # and "WEBP" at 8: checked below
    (b"%PDF-", "application/pdf"),
)
IMAGES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


def sniffed(data: str) -> str | None:
    """The media type base64 ``data``'s first bytes show (None: none known, or the data
    is not base64 at all)."""
    head_text = data[:44]
    try:
        head = base64.b64decode(head_text + "=" * (-len(head_text) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None
    for magic, kind in MAGIC:
        if head.startswith(magic):
            if kind == "image/webp" and head[8:12] != b"WEBP":
                return None
            return kind
    return None


def is_base64(data: str) -> bool:
    """Whether ``data`` is standard base64 throughout (padding included)."""
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def media_problem(data: str, declared: str | None, allowed: frozenset[str]) -> str | None:
    """Why base64 ``data`` (labelled ``declared``, if it is) may not be sent on, or None:
    not base64, of no kind ``allowed``, or not the kind its label says."""
    if not is_base64(data):
        return "is not base64 data"
    kind = sniffed(data)
    if kind is None or kind not in allowed:
        what = "a PNG, JPEG, GIF or WebP image" if allowed == IMAGES else "a PDF document"
        return f"is not {what} (by its first bytes)"
    if declared is not None and declared != kind:
        return f"is labelled {declared[:40]!r} but its bytes are {kind}"
    return None
