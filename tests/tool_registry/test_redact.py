"""Redaction of configured secrets: every form they take, across any chunking."""

from __future__ import annotations

import json
from urllib.parse import quote

from hypothesis import given
from hypothesis import strategies as st

from tool_registry.redact import MARK, MIN_CHARS, Redactor

SECRET = 'sk-live-Ab/12+cd"e'

# Secrets as operators write them: printable, no brackets (which ``[redacted]`` holds).
secret_text = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="[]"),
    min_size=MIN_CHARS,
    max_size=24,
)


def test_every_form_of_a_secret_is_replaced() -> None:
    redactor = Redactor([SECRET])
    escaped = json.dumps(SECRET)[1:-1]
    text = f"raw {SECRET} json {escaped} url {quote(SECRET, safe='')} end"
    assert redactor.text(text) == f"raw {MARK} json {MARK} url {MARK} end"
    assert redactor.data(text.encode()) == redactor.text(text).encode()


def test_short_secrets_and_no_secrets_leave_text_alone() -> None:
    assert not Redactor(["dev", ""])
    assert Redactor(["dev"]).text("dev mode") == "dev mode"
    assert Redactor([]).data(b"anything") == b"anything"


def test_the_longest_secret_wins_where_two_overlap() -> None:
    redactor = Redactor(["abcdefgh", "abcdefghijkl"])
    assert redactor.text("xabcdefghijklx") == f"x{MARK}x"


@given(
    secrets=st.lists(secret_text, min_size=1, max_size=3),
    pieces=st.lists(st.one_of(st.text(max_size=12), st.integers(0, 2)), max_size=12),
    cuts=st.lists(st.integers(0, 400), max_size=8),
)
def test_a_stream_in_any_chunking_carries_no_secret(
    secrets: list[str], pieces: list[str | int], cuts: list[int]
) -> None:
    """Text made of secrets (each piece an index into ``secrets``) and anything else,
    cut anywhere: no secret survives, and nothing else is lost."""
    whole = "".join(secrets[p % len(secrets)] if isinstance(p, int) else p for p in pieces)
    data = whole.encode()
    redactor = Redactor(secrets)
    stream = redactor.stream()
    out = b""
    start = 0
    for cut in sorted({min(c, len(data)) for c in cuts}):
        out += stream.feed(data[start:cut])
        start = cut
    out += stream.feed(data[start:]) + stream.flush()
    for secret in secrets:
        assert secret.encode() not in out
    assert out == redactor.data(data)


def test_a_cut_shows_no_part_of_any_secret_ascii_or_not() -> None:
    for secret in ("sk-live-0123456789abcdef", "clé-secrète-0123456789"):
        redactor = Redactor([secret])
        text = f"prefix {secret} suffix"
        for keep in range(len(text)):
            shown = redactor.cut(text, keep)
            assert not any(secret[:n] in shown for n in range(3, len(secret) + 1)), shown
        # Cut by bytes (a stream's chunk): a non-ASCII secret's start is held back.
        encoded = f"zz {secret}".encode()
        for end in range(4, len(encoded)):
            assert redactor.held_back(encoded[:end]) == end - 3
