"""The shapes the ``secrets`` and ``personal_data`` detectors find (docs/guardrails.md),
each an RE2 pattern, and the checks in Python that decide where a shape alone says too
little (a card number's Luhn digit, an IBAN's country and mod 97, a token's entropy).
They read the normalised text (``reading``): a pattern written for ASCII finds full-width
digits, accented letters and escaped forms too."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

import re2

SECRETS = {
    "private_key": (
        r"-----BEGIN [A-Z0-9 ]{0,24}PRIVATE KEY(?: BLOCK)?-----"
        r"(?:[A-Za-z0-9+/=\s:,-]*-----END [A-Z0-9 ]{0,24}PRIVATE KEY(?: BLOCK)?-----)?"
    ),
    "aws_access_key": r"\b(?:AKIA|ASIA|ABIA|ACCA|AROA|AIDA)[0-9A-Z]{16}\b",
    "github_token": r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b",
    "anthropic_key": r"\bsk-ant-[A-Za-z0-9]{2,8}-[A-Za-z0-9_-]{20,}",
    "openai_key": r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",
    "slack_token": r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
    "stripe_key": r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}",
    "google_api_key": r"\bAIza[0-9A-Za-z_-]{35}",
    "jwt": r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    "bearer_token": r"\b[Bb]earer[ \t]+[A-Za-z0-9._~+/-]{20,}=*",
    "url_credentials": r"\b[a-zA-Z][a-zA-Z0-9+.-]{1,20}://[^\s:/@]{1,64}:[^\s@/]{3,128}@",
}
# A secret-named setting: its value is the span (its one group).
ASSIGNED = (
    r"(?i)\b(?:[a-z0-9]{1,32}[_-]){0,4}(?:password|passwd|pwd|secret|client[_-]?secret|api[_-]?key|apikey|"
    r"access[_-]?key(?:[_-]?id)?|secret[_-]?access[_-]?key|access[_-]?token|auth[_-]?token|"
    r"refresh[_-]?token|private[_-]?key)\b[\"']?[ \t]*[:=][ \t]*[\"']?"
    r"([^\s\"',;<>]{8,256})"
)
RANDOM = r"[A-Za-z0-9+/_=-]{24,256}"  # a token that may be random (its entropy decides)

PERSONAL = {
    # Any script's letters in either part (``用户@例子.广告``); ``%40`` an ``@`` as a URL
    # writes it (a character reference is read decoded).
    "email": r"[\p{L}\p{N}._%+-]+(?:@|%40)(?:[\p{L}\p{N}-]+\.)+\p{L}{2,}",
    # In either case: its country's length and mod 97 decide.
    "iban": r"(?i)\b[A-Z]{2}[0-9]{2}(?:[ ]?[A-Z0-9]{4}){2,7}(?:[ ]?[A-Z0-9]{1,3})?\b",
    "card_number": (
        r"\b[3-6][0-9](?:[ -]?[0-9]){11,17}\b"
        r"|\b[3-6][0-9]{3}(?:\.[0-9]{4}){3}\b|\b3[47][0-9]{2}\.[0-9]{6}\.[0-9]{5}\b"
    ),
    "phone": (
        r"(?:\+[1-9][0-9]{0,2}[ .-]?(?:\([0-9]{1,4}\)[ .-]?)?[0-9]{1,4}(?:[ .-]?[0-9]{2,4}){2,4}"
        r"|\([2-9][0-9]{2}\)[ ]?[2-9][0-9]{2}[-. ][0-9]{4}"
        r"|\b[2-9][0-9]{2}[-.][2-9][0-9]{2}[-.][0-9]{4})\b"
    ),
    "us_ssn": r"\b[0-8][0-9]{2}-[0-9]{2}-[0-9]{4}\b",
}


# Each IBAN country's length (SWIFT's IBAN registry).
IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22,
    "BH": 22, "BI": 27, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24,
    "DE": 22, "DJ": 27, "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18,
    "FK": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27,
    "GT": 28, "HN": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26,
    "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20,
    "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MN": 20,
    "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23, "PK": 24,
    "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24,
    "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25,
    "SV": 28, "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}  # fmt: skip


def _luhn(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if index % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _iban(text: str) -> bool:
    compact = "".join(text.split()).upper()
    if IBAN_LENGTHS.get(compact[:2]) != len(compact):
        return False
    moved = compact[4:] + compact[:4]
    number = "".join(str(int(char, 36)) for char in moved)
    return int(number) % 97 == 1


def random_looking(token: str) -> bool:
    """Whether ``token`` looks like a random secret: high entropy per character, mixed
    letters and digits (a hex digest, a word run together, a path are not)."""
    if not (any(c.isdigit() for c in token) and any(c.isupper() for c in token)):
        return False
    if not any(c.islower() for c in token):
        return False
    # Words run together (a URL's path, a slug) are not random, however long.
    parts = [p for p in _SEPARATORS.split(token) if p]
    wordish = sum(len(p) for p in parts if _word(p))
    if len(parts) >= 3 and wordish >= 0.6 * len(token):
        return False
    counts = Counter(token)
    size = len(token)
    entropy = -sum(n / size * math.log2(n / size) for n in counts.values())
    return entropy >= 4.3 if size < 40 else entropy >= 4.6


_SEPARATORS = re2.compile(r"[-/_.+=]")
_VOWELS = re2.compile(r"[aeiouyAEIOUY]")


def _word(part: str) -> bool:
    """Whether ``part`` reads as a word: letters in one case (or capitalised), a vowel."""
    if len(part) < 3 or not part.isalpha() or _VOWELS.search(part) is None:
        return False
    return part.islower() or part.isupper() or (part[0].isupper() and part[1:].islower())


def _digits(text: str) -> str:
    return "".join(c for c in text if c.isdigit())


CHECKS: dict[str, Callable[[str], bool]] = {
    "card_number": lambda found: 13 <= len(_digits(found)) <= 19 and _luhn(_digits(found)),
    "iban": _iban,
    "email": lambda found: len(found) <= 320,  # RFC 5321's bound (counted bounds of
    # any script's letters would make the automaton too large to cache)
    "phone": lambda found: 8 <= len(_digits(found)) <= 15,
    "us_ssn": lambda found: not found.startswith(("000", "666")) and found[4:6] != "00",
}
