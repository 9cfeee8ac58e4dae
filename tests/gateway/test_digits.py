"""Whole numbers a client writes (query strings, headers): ASCII digits or nothing.
``str.isdigit`` takes "²", which ``int`` refuses: a 500 where a 400 (or no number)
was due."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.digits import whole


def test_ascii_digits_are_a_number_and_nothing_else_is() -> None:
    assert whole("0") == 0
    assert whole("0042") == 42
    for text in (None, "", "²", "١٢٣", "4²", "-1", "+1", " 1", "1.0", "1e3", "x"):
        assert whole(text) is None, text
    assert whole("1" * 19) is None  # past max_digits
    assert whole("123", max_digits=2) is None


@given(st.text(max_size=24))
def test_any_text_is_a_whole_number_or_none(text: str) -> None:
    found = whole(text)
    assert found is None or (text.isascii() and text.isdigit() and found == int(text))
