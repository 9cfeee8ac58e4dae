"""How the guardrail detectors read a text (docs/guardrails.md): one normalisation for
every source and path, so that a payload gets one verdict in every form it is handed
over in; and where each character read came from, so that a span found is the original
text's.

What is looked through, each a match of one pattern (``_ESCAPES``, ``_HEX``):

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

import re2

_ESCAPES = (
    r"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"  # an escaped pair
    r"|\\u[0-9a-fA-F]{4}|\\x[0-9a-fA-F]{2}(?:\\x[0-9a-fA-F]{2})+|\\[nrtbf\"/\\]"
    r"|&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});"
    r"|%[0-9a-fA-F]{2}(?:%[0-9a-fA-F]{2})*"
    r"|[^\x00-\x7f]+|[ \t\n\r\f\v]{2,}"
)
_HEX = r"\b[0-9a-fA-F]{24,}\b"
_LOOKED_THROUGH = re.compile(_ESCAPES)
_LOOKED_THROUGH_HEX = re.compile(f"{_ESCAPES}|{_HEX}")
# Whether a text holds anything to look through, and hex text: RE2's automaton answers
# in one pass (Python's engine tries a word's edge at every character).
_ANY = re2.compile(f"{_ESCAPES}|{_HEX}")
_ANY_HEX = re2.compile(_HEX)
# Anything but characters past ASCII: a text without it is read in one step.
_MARKED = re2.compile(_ESCAPES.replace(r"|[^\x00-\x7f]+", "") + f"|{_HEX}")
_HIDDEN = frozenset(
    "\u00ad\u180e\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
    "\u2060\u2061\u2062\u2063\u2064\ufeff"
)
_ANY_HIDDEN = re2.compile("[" + "".join(f"\\x{{{ord(c):x}}}" for c in _HIDDEN) + "]")
_DELIMITERS = frozenset("@:/?#&=%")
_SIMPLE_ESCAPES = {
    "\\" + escape: read
    for escape, read in zip('nrtbf"/\\', ["\n", " ", " ", "", " ", '"', "/", "\\"], strict=True)
}


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
_LOOKALIKE_RUN = "[" + _LOOKALIKES[0::2] + "]+"
_LOOKALIKE = re2.compile(_LOOKALIKE_RUN)
_ACCENTED = re2.compile("[" + "".join(f"\\x{{{c:x}}}" for c in _latin_table()) + "]")
_SPACE = frozenset(" \t\n\r\f\v")
_BESIDE_LATIN = re.compile(f"(?<=[A-Za-z0-9]){_LOOKALIKE_RUN}|{_LOOKALIKE_RUN}(?=[A-Za-z0-9])")


def fold(text: str) -> str:
    """``text`` past NFKC with its Latin letters' accents left out: how a phrasing is
    written for the detectors (they read every text so)."""
    return unicodedata.normalize("NFKC", text).translate(_LATIN)


def normalises(text: str) -> bool:
    """Whether ``text`` is read other than as it is (its reading costs a step per
    escape, run of spaces or run past ASCII: a caller may do it off the loop)."""
    return _ANY.search(text) is not None


Positions = tuple[list[int], list[int]]


def normalised(text: str) -> tuple[str, Positions | None]:
    """``text`` as the detectors read it, and where each character read starts and ends
    in ``text`` (None when the text is read as it is)."""
    if _ANY.search(text) is None:
        return text, None
    if _MARKED.search(text) is None and _ANY_HIDDEN.search(text) is None:
        # Only characters past ASCII, most text in any script: one for one in one step.
        folded = unicodedata.normalize("NFKC", text)
        if _ACCENTED.search(folded) is not None:
            folded = folded.translate(_LATIN)
        if len(folded) == len(text):
            if _LOOKALIKE.search(folded) is None:
                return folded, None
            return _BESIDE_LATIN.sub(lambda m: m.group().translate(_AS_LATIN), folded), None
    looked_through = _LOOKED_THROUGH if _ANY_HEX.search(text) is None else _LOOKED_THROUGH_HEX
    kept: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    at = 0
    for match in looked_through.finditer(text):
        start, end = match.span()
        piece = match.group()
        first = piece[0]
        if first.isascii():
            kept.append(text[at:start])
            starts += range(at, start)
            ends += range(at + 1, start + 1)
            if first in _SPACE:  # a run of spaces: one
                kept.append("\n" if "\n" in piece else " ")
                starts.append(start)
                ends.append(end)
            else:  # an escape, a reference or hex, whole
                read = _decoded(piece)
                kept.append(read)
                starts += [start] * len(read)
                ends += [end] * len(read)
            at = end
            continue
        if unicodedata.combining(first) and start > at and text[start - 1].isalpha():
            start -= 1  # a decomposed accent: read with its letter
            piece = text[start:end]
        kept.append(text[at:start])
        starts += range(at, start)
        ends += range(at + 1, start + 1)
        beside = _latin_at(text, start - 1) or _latin_at(text, end)
        run = _folded(piece, beside)
        if run is None or (not run[1] and len(run[0]) == len(piece)):
            kept.append(piece if run is None else run[0])
            starts += range(start, end)
            ends += range(start + 1, end + 1)
        else:
            kept.append(run[0])
            starts += [start + a for a in run[1]]
            ends += [start + b for b in run[2]]
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
    simple = _SIMPLE_ESCAPES.get(piece) if len(piece) == 2 else None
    if simple is not None:  # the most common by far: ``\\"``, ``\\n``
        return simple
    first = piece[0]
    if first == "&":
        return _folded_text(html.unescape(piece))
    if first == "%" or piece.startswith("\\x"):
        step = 3 if first == "%" else 4
        raw = bytes(int(piece[i + step - 2 : i + step], 16) for i in range(0, len(piece), step))
        read = _text_of(raw)
        # A URL's own delimiter escaped alone stays as written (``user:p%40ss@host``).
        return piece if read is None or read in _DELIMITERS else read
    if first != "\\":  # hex text: read as what it spells, when that is ASCII text
        if len(piece) % 2:
            return piece
        raw = bytes.fromhex(piece)
        return raw.decode() if all(32 <= b < 127 for b in raw) else piece
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
