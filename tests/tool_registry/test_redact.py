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


# Secrets of any length (a user's JWT is kilobytes), with the characters JSON escapes.
long_secret = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="[]"),
    min_size=MIN_CHARS,
    max_size=2500,
)


def test_a_secret_of_kilobytes_is_redacted_and_its_beginning_at_a_cut_too() -> None:
    token = "eyJ" + "".join(chr(0x41 + (i * 7) % 26) for i in range(3000))
    redactor = Redactor([token])  # a pattern nested per character overflowed the parser
    assert redactor.text(f"a {token} b") == f"a {MARK} b"
    for keep in (3, 40, 48, 49, 50, 1000, 3002):  # a body read up to its cap, say
        assert redactor.tail(f"x {token[:keep]}") == f"x {MARK}"
    assert redactor.tail(f"x {token[:2]}") == f"x {token[:2]}"  # too little to tell
    assert redactor.held_back(f"x {token[:2000]}".encode()) == 2000


@given(
    secret=long_secret,
    before=st.text(max_size=50),
    after=st.text(max_size=50),
    keep=st.integers(0, 3000),
    escaped=st.booleans(),
)
def test_a_cut_anywhere_shows_no_part_of_a_secret_raw_or_escaped(
    secret: str, before: str, after: str, keep: int, escaped: bool
) -> None:
    """A result holding a secret, as it was or inside JSON, cut anywhere: what is shown
    holds neither the secret nor its first three characters or more at the cut."""
    written = json.dumps(secret)[1:-1] if escaped else secret
    shown = Redactor([secret]).cut(before + written + after, len(before) + keep)
    assert secret not in shown
    assert written not in shown
    head = shown.partition("…[truncated")[0]
    assert not any(head.endswith(written[:n]) for n in range(3, len(written)))
    # A body read up to its cap, ending inside the secret: its beginning goes too.
    capped = Redactor([secret]).tail(before + written[:keep])
    assert not any(capped.endswith(written[:n]) for n in range(3, len(written)))


def test_plus_adds_a_secret_of_any_length_for_one_use() -> None:
    configured = Redactor(["sk-configured-1234"])
    call = configured.plus(["tok", "user-token-5678"])
    assert call.text("sk-configured-1234 tok") == f"{MARK} {MARK}"
    assert call.cut("abc sk-configured-1234 and user-token-5678", 30) == f"abc {MARK} and {MARK}"
    assert call.tail("abc sk-configured-1234 and user-tok") == f"abc sk-configured-1234 and {MARK}"
    assert call.tail("abc sk-configured") == f"abc {MARK}"  # the configured ones too
    assert configured.text("tok user-token-5678") == "tok user-token-5678"  # unchanged
    assert call.data(b"x tok") == b"x " + MARK.encode()
