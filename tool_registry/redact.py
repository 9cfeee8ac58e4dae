"""Redaction of configured secrets from any text the gateway emits or passes on.

``display_url`` is how a configured URL is shown (a source's label, a message): its
userinfo and query values are ``[redacted]``, where a password or key is written.

A secret is replaced wherever it appears, as it is and in the two other forms it takes
in the texts that pass here: JSON-escaped and percent-encoded. Secrets shorter than
``MIN_CHARS`` are not redacted (replacing ``dev`` everywhere would mangle answers);
``toolgate check`` says so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import AnyStr
from urllib.parse import quote, unquote_plus, urlsplit, urlunsplit

__all__ = ["MARK", "MIN_CHARS", "Redactor", "StreamRedactor", "display_url", "url_secrets"]

MARK = "[redacted]"
MIN_CHARS = 8
# A text cut right inside a secret ends in the secret's beginning: from this many
# characters on, that beginning is redacted too (fewer tell nothing of a long secret).
MIN_PREFIX_AT_CUT = 3


def display_url(url: str) -> str:
    """``url`` as it may be shown: its userinfo and each query value ``[redacted]``
    (``http://u:p@h/d.json?key=k&v`` → ``http://[redacted]@h/d.json?key=[redacted]&v``);
    a text that is no URL (a file's path) as it is."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return MARK  # no URL a reader could tell from its secrets
    if not parts.scheme or not parts.netloc:
        return url
    host = parts.hostname or ""
    netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port is not None else "")
    if "@" in parts.netloc:
        netloc = f"{MARK}@{netloc}"
    query = "&".join(
        f"{name}={MARK}" if sep else name
        for name, sep, _ in (pair.partition("=") for pair in parts.query.split("&") if pair)
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def url_secrets(url: str) -> list[str]:
    """What a configured URL holds that may be a credential: its password (or a user
    alone) and its query values."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    found = [parts.password or parts.username or ""]
    for _, _, value in (pair.partition("=") for pair in parts.query.split("&")):
        found += [value, unquote_plus(value)]  # as written, and as a server reads it
    return list(dict.fromkeys(text for text in found if text))


def _forms(secret: str) -> set[str]:
    return {secret, json.dumps(secret, ensure_ascii=False)[1:-1], quote(secret, safe="")}


# A secret's beginning at the end of a text is found in two ways: one of up to this many
# characters by a pattern (nested groups, as many as its characters: a pattern for a
# 2 KB token would overflow the parser), a longer one by finding the text's last
# characters in the secret and checking the text ends with all of the secret before.
_PATTERN_PREFIX = 48


def _proper_prefixes(secret: str) -> str:
    """A pattern matching any non-empty proper prefix of ``secret`` of at most
    ``_PATTERN_PREFIX`` characters: ``a(?:b(?:c)?)?``. Bytes pass as latin-1 text (a
    character a byte), so a byte pattern never splits a character and a text pattern
    never splits a byte sequence."""
    head, middle = re.escape(secret[:1]), secret[1 : min(len(secret) - 1, _PATTERN_PREFIX)]
    inner = ""
    for index in range(len(middle) - 1, -1, -1):
        inner = "(?:" + re.escape(middle[index]) + inner + ")?"
    return head + inner


def _long_prefix(data: AnyStr, secrets: tuple[AnyStr, ...]) -> int:
    """The length of the longest end of ``data`` that is a proper prefix of one of
    ``secrets`` longer than ``_PATTERN_PREFIX`` characters (0: none is)."""
    if len(data) <= _PATTERN_PREFIX:
        return 0
    tail = data[-_PATTERN_PREFIX:]
    best = 0
    for secret in secrets:
        at = secret.find(tail, 1)
        while at != -1 and at + _PATTERN_PREFIX < len(secret):
            length = at + _PATTERN_PREFIX
            if length > best and data.endswith(secret[:length]):
                best = length
            at = secret.find(tail, at + 1)
    return best


class Redactor:
    """Replaces every configured secret with ``[redacted]``; falsy when it has none.

    One redactor serves the whole process (responses, tool results, log lines): a
    reload ``extend``s it with the new configuration's secrets and keeps the old ones,
    which stay secret after a key is rotated. ``plus`` makes one for a single call
    (a user's token): its own secrets over this one's, which it reads as they stand."""

    __slots__ = (
        "_bytes",
        "_encoded",
        "_long_bytes",
        "_long_text",
        "_partial",
        "_partial_text",
        "_raw",
        "_text",
        "_under",
        "secrets",
    )

    def __init__(
        self, secrets: Iterable[str], *, under: Redactor | None = None, min_chars: int = MIN_CHARS
    ) -> None:
        self._under = under
        self._compile(frozenset(s for s in secrets if len(s) >= min_chars))

    def plus(self, secrets: Iterable[str]) -> Redactor:
        """This redactor and ``secrets`` too (of any length: a user's token, registered
        before the result it may be in is read), for one use; this one is unchanged."""
        return Redactor(secrets, under=self, min_chars=1)

    def extend(self, secrets: Iterable[str]) -> None:
        """Redact ``secrets`` too, from now on (every attribute is replaced in one step
        of the event loop)."""
        raw = self._raw | {s for s in secrets if len(s) >= MIN_CHARS}
        if raw != self._raw:
            self._compile(raw)

    def _compile(self, raw: frozenset[str]) -> None:
        self._raw = raw
        forms = {form for s in raw for form in _forms(s)}
        self.secrets: tuple[str, ...] = tuple(sorted(forms, key=lambda s: (-len(s), s)))
        encoded = [s.encode() for s in self.secrets]
        self._encoded = tuple(encoded)
        self._text = re.compile("|".join(map(re.escape, self.secrets))) if forms else None
        self._bytes = re.compile(b"|".join(map(re.escape, encoded))) if forms else None
        # A secret's start at the end of a chunk (bytes, as latin-1 text) or a cut text.
        in_bytes = "|".join(_proper_prefixes(s.decode("latin-1")) for s in encoded)
        self._partial = re.compile(f"(?:{in_bytes})\\Z".encode("latin-1")) if forms else None
        in_text = "|".join(_proper_prefixes(s) for s in self.secrets)
        self._partial_text = re.compile(f"(?:{in_text})\\Z") if forms else None
        self._long_text = tuple(s for s in self.secrets if len(s) > _PATTERN_PREFIX + 1)
        self._long_bytes = tuple(s for s in encoded if len(s) > _PATTERN_PREFIX + 1)

    def __bool__(self) -> bool:
        return self._text is not None or bool(self._under)

    def text(self, value: str) -> str:
        if self._under is not None:
            value = self._under.text(value)
        if self._text is None or not value:
            return value
        # A plain search per secret first: far cheaper than the alternation when, as
        # nearly always, there is nothing to replace.
        if not any(secret in value for secret in self.secrets):
            return value
        return self._text.sub(MARK, value)

    def cut(self, text: str, max_chars: int) -> str:
        """``text`` redacted, then cut to ``max_chars`` with a visible marker; a secret's
        beginning left at the cut (``MIN_PREFIX_AT_CUT`` characters or more) is redacted
        too, so no cut shows part of a secret."""
        text = self.text(text)
        if len(text) <= max_chars:
            return text
        return f"{self.tail(text[:max_chars])}…[truncated {len(text) - max_chars} characters]"

    def tail(self, text: str) -> str:
        """``text``, which was cut, with a secret's beginning at its end redacted."""
        if self._under is not None:
            text = self._under.tail(text)
        if self._partial_text is None:
            return text
        found = self._partial_text.search(text, max(0, len(text) - _PATTERN_PREFIX))
        length = max(
            len(text) - found.start() if found is not None else 0,
            _long_prefix(text, self._long_text),
        )
        if length >= MIN_PREFIX_AT_CUT:
            return text[:-length] + MARK
        return text

    def found(self, value: bytes) -> bool:
        """Whether ``value`` holds a secret in any of its forms (every answer's body
        is looked at)."""
        if self._under is not None and self._under.found(value):
            return True
        return self._holds(value)

    def _holds(self, value: bytes) -> bool:
        """Whether ``value`` holds one of this redactor's own secrets' forms."""
        for secret in self._encoded:  # noqa: SIM110 - a third quicker than any() here
            if secret in value:
                return True
        return False

    def data(self, value: bytes) -> bytes:
        """``value`` redacted; the very object when there was nothing to replace."""
        if self._under is not None:
            value = self._under.data(value)
        if self._bytes is None or not value or not self._holds(value):
            return value
        return self._bytes.sub(MARK.encode(), value)

    def held_back(self, data: bytes) -> int:
        """How many bytes at the end of ``data`` could be the start of a secret that the
        next chunk completes (0 if none)."""
        under = self._under.held_back(data) if self._under is not None else 0
        if self._partial is None:
            return under
        match = self._partial.search(data, max(0, len(data) - _PATTERN_PREFIX))
        own = len(data) - match.start() if match is not None else 0
        return max(under, own, _long_prefix(data, self._long_bytes))

    def stream(self) -> StreamRedactor:
        return StreamRedactor(self)


class StreamRedactor:
    """Redacts a byte stream whatever its chunking: a chunk ending in what may be the
    start of a secret keeps that end back until the next chunk (or ``flush``) decides."""

    __slots__ = ("_held", "_redactor")

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._held = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._redactor.data(self._held + chunk if self._held else chunk)
        keep = self._redactor.held_back(data)
        if keep:
            self._held = data[-keep:]
            return data[:-keep]
        self._held = b""
        return data

    def flush(self) -> bytes:
        held, self._held = self._held, b""
        return held
