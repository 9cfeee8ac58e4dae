"""How the guardrail detectors read a text (docs/guardrails.md): one normalisation for
every source and path, so that a payload gets one verdict in every form it is handed
over in; and where each character read came from, so that a span found is the original
text's.

What is looked through, each a match of one pattern (``_LOOKED_THROUGH``):

- escapes: JSON's (a result that is JSON text holds a nested document's quotes as
  ``\\"``, any character as ``\\u0041``), runs of ``\\x41`` escapes, percent-escapes
  (``%41%4B…``; a URL's delimiter escaped alone stays as written), HTML's character
  references (``&#64;``, ``&#x40;``, ``&commat;``), and hex text that spells printable
  ASCII (a key written as ``414b4941…``): each read decoded, as a model reads it;
- invisible format characters an attacker splits words with (zero-width spaces and
  joiners, soft hyphens, word joiners, bidi marks): read as nothing;
- every character past ASCII: compatibility forms folded (NFKC: full-width ``ＩＧＮＯＲＥ``
  is ``IGNORE``, a no-break space a space), a Latin letter's accents left out
  (``instruções`` is ``instrucoes``, ``ı`` is ``i``), and a Cyrillic, Greek or Armenian
  letter that looks Latin read as that letter where it stands beside Latin letters or
  digits (``іgnоrе`` with Cyrillic і, о, е is ``ignore``; a Russian word is left Russian);
- a run of spaces: one space (a line break where it holds one).

(Python's own engine: its alternatives start with distinct characters and repeat nothing
nested, so it runs in linear time, and it is far cheaper per match than RE2's binding,
where a text holds a match every few characters.)
"""

from __future__ import annotations

import html
import re
import unicodedata

_LOOKED_THROUGH = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"  # an escaped pair
    r"|\\u[0-9a-fA-F]{4}|(?:\\x[0-9a-fA-F]{2}){2,}|\\[nrtbf\"/\\]"
    r"|&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});"
    r"|(?:%[0-9a-fA-F]{2})+"
    r"|\b(?:[0-9a-fA-F]{2}){12,}\b"
    r"|[^\x00-\x7f]+|[ \t\n\r\f\v]{2,}"
)
_HIDDEN = frozenset(
    "\u00ad\u180e\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
    "\u2060\u2061\u2062\u2063\u2064\ufeff"
)
_DELIMITERS = frozenset("@:/?#&=%")
_SIMPLE_ESCAPES = {"n": "\n", "r": " ", "t": " ", "b": "", "f": " ", '"': '"', "/": "/", "\\": "\\"}


def _latin_table() -> dict[int, str | None]:
    """Each accented Latin letter to its letter (one for one), dotless i to i, and the
    combining accents to nothing (a decomposed ``é`` is read as ``e``)."""
    table: dict[int, str | None] = {
        ord(a): b for a, b in zip("ıȷłŁđĐøØħ", "ijlLdDoOh", strict=True)
    }
    for code in [*range(0xC0, 0x250), *range(0x1E00, 0x1F00)]:
        char = chr(code)
        bare = "".join(
            c for c in unicodedata.normalize("NFKD", char) if not unicodedata.combining(c)
        )
        if len(bare) == 1 and bare.isascii() and bare.isalpha() and bare != char:
            table[code] = bare
    for code in range(0x300, 0x370):
        table[code] = None
    return table


# Letters of other scripts that look Latin, read as Latin beside Latin letters.
_LOOKALIKES = (
    "аaвbеeкkмmнhоoрpсcтtуyхxіiјjѕsһhԁdԛqԝwӏlүyАAВBЕEКKМMНHОOРPСCТTУYХXІIЈJЅSҮYԚQԜW"
    "αaβbεeιiκkνvοoρpτtυuχxΑAΒBΕEΖZΗHΙIΚKΜMΝNΟOΡPΤTΥYΧXϲcϳj"
    "օoսuհhոnզqɡgɑaɩi"
)
_LATIN = str.maketrans(_latin_table())
_AS_LATIN = str.maketrans(_LOOKALIKES[0::2], _LOOKALIKES[1::2])


def fold(text: str) -> str:
    """``text`` past NFKC with its Latin letters' accents left out: how a phrasing is
    written for the detectors (they read every text so)."""
    return unicodedata.normalize("NFKC", text).translate(_LATIN)


def normalises(text: str) -> bool:
    """Whether ``text`` is read other than as it is (its reading costs a step per
    escape, run of spaces or run past ASCII: a caller may do it off the loop)."""
    return _LOOKED_THROUGH.search(text) is not None


Positions = tuple[list[int], list[int]]


def normalised(text: str) -> tuple[str, Positions | None]:
    """``text`` as the detectors read it, and where each character read starts and ends
    in ``text`` (None when the text is read as it is)."""
    if _LOOKED_THROUGH.search(text) is None:
        return text, None
    kept: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    at = 0
    for match in _LOOKED_THROUGH.finditer(text):
        start, end = match.span()
        piece = match.group()
        past_ascii = not piece[0].isascii()
        if unicodedata.combining(piece[0]) and start > at and text[start - 1].isalpha():
            start -= 1  # a decomposed accent: read with its letter
            piece = text[start:end]
        kept.append(text[at:start])
        starts += range(at, start)
        ends += range(at + 1, start + 1)
        if piece.isspace() and piece.isascii():  # a run of spaces: one
            kept.append("\n" if "\n" in piece else " ")
            starts.append(start)
            ends.append(end)
        elif past_ascii:
            beside = _latin_at(text, start - 1) or _latin_at(text, end)
            folded = _folded(piece, beside)
            if folded is None or (not folded[1] and len(folded[0]) == len(piece)):
                kept.append(piece if folded is None else folded[0])
                starts += range(start, end)
                ends += range(start + 1, end + 1)
            else:
                kept.append(folded[0])
                starts += [start + a for a in folded[1]]
                ends += [start + b for b in folded[2]]
        else:  # an escape, or hex, whole
            read = _decoded(piece)
            kept.append(read)
            starts += [start] * len(read)
            ends += [end] * len(read)
        at = end
    kept.append(text[at:])
    starts += range(at, len(text))
    ends += range(at + 1, len(text) + 1)
    return "".join(kept), (starts, ends)


def _latin_at(text: str, index: int) -> bool:
    return 0 <= index < len(text) and text[index].isascii() and text[index].isalnum()


def _folded(run: str, beside_latin: bool) -> tuple[str, list[int], list[int]] | None:
    """A run of characters past ASCII (a decomposed accent's letter first) as read, with
    where each read character starts and ends in the run; None when it reads as it is,
    no spans when one for one (most text in any script takes one step for the run)."""
    if _HIDDEN.isdisjoint(run):
        folded = _fold(unicodedata.normalize("NFKC", run), beside_latin)
        if len(folded) == len(run):
            return None if folded == run else (folded, [], [])
    read: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    index = 0
    while index < len(run):  # a letter and the accents that follow it, together
        end = index + 1
        while end < len(run) and unicodedata.combining(run[end]):
            end += 1
        piece = _read(run[index:end], beside_latin)
        read.append(piece)
        starts += [index] * len(piece)
        ends += [end] * len(piece)
        index = end
    return "".join(read), starts, ends


def _fold(text: str, beside_latin: bool) -> str:
    text = text.translate(_LATIN)
    return text.translate(_AS_LATIN) if beside_latin else text


def _read(piece: str, beside_latin: bool) -> str:
    """One character past ASCII (with its accents) as the detectors read it."""
    if piece in _HIDDEN:
        return ""
    if piece.isspace():
        return " "
    return _fold(unicodedata.normalize("NFKC", piece), beside_latin)


def _decoded(piece: str) -> str:
    """An escape (or a run of them), a character reference or hex text, as read."""
    if piece[0] == "&":
        return _folded_text(html.unescape(piece))
    if piece[0] == "%" or piece.startswith("\\x"):
        step = 3 if piece[0] == "%" else 4
        raw = bytes(int(piece[i + step - 2 : i + step], 16) for i in range(0, len(piece), step))
        read = _text_of(raw)
        # A URL's own delimiter escaped alone stays as written (``user:p%40ss@host``).
        return piece if read is None or read in _DELIMITERS else read
    if piece[0] != "\\":  # hex text: read as what it spells, when that is ASCII text
        raw = bytes.fromhex(piece)
        return raw.decode() if all(32 <= b < 127 for b in raw) else piece
    if piece[1] != "u":
        return _SIMPLE_ESCAPES[piece[1]]
    units = [int(piece[i + 2 : i + 6], 16) for i in range(0, len(piece), 6)]
    if len(units) == 2:
        char = chr(0x10000 + ((units[0] - 0xD800) << 10) + (units[1] - 0xDC00))
    elif 0xD800 <= units[0] <= 0xDFFF:  # half a pair: nothing a model reads
        return ""
    else:
        char = chr(units[0])
    if char.isascii():
        return " " if char in "\r\t" else char
    return _folded_text(char)


def _text_of(raw: bytes) -> str | None:
    try:
        return _folded_text(raw.decode())
    except UnicodeDecodeError:
        return None


def _folded_text(text: str) -> str:
    """A decoded text past ASCII as read (no positions inside an escape: the escape is
    one place)."""
    if text.isascii():
        return text
    return "".join(_read(c, False) for c in text)
