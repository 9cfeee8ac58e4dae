"""Whole numbers written by someone else (a query string, a header): ASCII digits only.
``str.isdigit`` also takes superscripts and other scripts' digits, some of which
``int`` then refuses ("²") — a client's 500 where a 400 was due."""

from __future__ import annotations


def whole(text: str | None, max_digits: int = 18) -> int | None:
    """``text`` as a whole number, if it is 1 to ``max_digits`` ASCII digits; else None."""
    if text is None or not 0 < len(text) <= max_digits or not text.isascii():
        return None
    return int(text) if text.isdigit() else None
