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


def _proper_prefixes(secret: str) -> str:
    """A pattern matching any non-empty proper prefix of ``secret``: ``a(?:b(?:c)?)?``.
    Bytes pass as latin-1 text (a character a byte), so a byte pattern never splits a
    character and a text pattern never splits a byte sequence."""
    head, middle = re.escape(secret[:1]), secret[1:-1]
    inner = ""
    for index in range(len(middle) - 1, -1, -1):
        inner = "(?:" + re.escape(middle[index]) + inner + ")?"
    return head + inner


class Redactor:
    """Replaces every configured secret with ``[redacted]``; falsy when it has none.

    One redactor serves the whole process (responses, tool results, log lines): a
    reload ``extend``s it with the new configuration's secrets and keeps the old ones,
    which stay secret after a key is rotated."""

    __slots__ = (
        "_bytes",
        "_encoded",
        "_longest",
        "_partial",
        "_partial_text",
        "_raw",
        "_text",
        "secrets",
    )

    def __init__(self, secrets: Iterable[str]) -> None:
        self._compile(frozenset(s for s in secrets if len(s) >= MIN_CHARS))

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
        self._longest = max((len(s) for s in encoded), default=0)
        in_text = "|".join(_proper_prefixes(s) for s in self.secrets)
        self._partial_text = re.compile(f"(?:{in_text})\\Z") if forms else None

    def __bool__(self) -> bool:
        return self._text is not None

    def text(self, value: str) -> str:
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
        if self._partial_text is None:
            return text
        found = self._partial_text.search(text, max(0, len(text) - len(self.secrets[0]) + 1))
        if found is not None and len(text) - found.start() >= MIN_PREFIX_AT_CUT:
            return text[: found.start()] + MARK
        return text

    def found(self, value: bytes) -> bool:
        """Whether ``value`` holds a secret in any of its forms."""
        return any(secret in value for secret in self._encoded)

    def data(self, value: bytes) -> bytes:
        """``value`` redacted; the very object when there was nothing to replace."""
        if self._bytes is None or not value or not self.found(value):
            return value
        return self._bytes.sub(MARK.encode(), value)

    def held_back(self, data: bytes) -> int:
        """How many bytes at the end of ``data`` could be the start of a secret that the
        next chunk completes (0 if none)."""
        if self._partial is None:
            return 0
        match = self._partial.search(data, max(0, len(data) - self._longest + 1))
        return len(data) - match.start() if match is not None else 0

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
