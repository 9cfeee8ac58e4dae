"""The built-in guardrail detectors (docs/guardrails.md): cheap, local, and linear in the
text. Every pattern runs on RE2, so no text — a tool's, a model's, a client's — can make
a search backtrack; what a pattern finds is checked further in Python where a shape alone
says too little (a card number's Luhn digit, an IBAN's mod 97, a token's entropy).

- ``secrets``: private key blocks, the shapes of well-known keys and tokens (AWS, GitHub,
  OpenAI, Anthropic, Slack, Stripe, Google, JWTs, bearer tokens, credentials in a URL),
  a secret-named setting's value (``password: …``, ``api_key=…``), and long random-looking
  strings (high Shannon entropy, mixed classes: a hex digest or a UUID is not one);
- ``personal_data``: email addresses, phone numbers (international, or the North American
  shapes), card numbers that pass Luhn, IBANs that pass mod 97, US social security numbers;
- ``injection``: known phrasings that tell a model to drop its instructions, take a new
  role, reveal its prompt or hide what it does, and chat-template markers, in English and
  a few common phrasings in German, French and Spanish.

Every detector reads one normalisation of the text (``_normalised``), whatever its source
or path: JSON escapes decoded (a nested document's ``\\"db_password\\"``, an escaped
``\\u0041KIA…``), zero-width and other invisible format characters looked through (an
attacker's ``ig\u200bnore previous instructions`` is found), every space a space and a
phrasing found across line breaks, compatibility forms folded (NFKC: full-width
letters); a span found is the original text's.
What they miss is in the docs: paraphrase, other languages, encodings (base64, leetspeak),
and secrets with no known shape and little entropy.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import re2

from gateway.config import Detector
from tool_registry import immutable

_OPTIONS = re2.Options()
_OPTIONS.max_mem = 64 << 20  # the combined patterns' automata fit; a text never grows them


@immutable
class Finding:
    """What a detector found: its kind, what it is (``label``), and where."""

    kind: Detector
    label: str
    start: int
    end: int


_SECRETS = {
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
_ASSIGNED = (
    r"(?i)\b(?:[a-z0-9]{1,32}[_-]){0,4}(?:password|passwd|pwd|secret|client[_-]?secret|api[_-]?key|apikey|"
    r"access[_-]?key(?:[_-]?id)?|secret[_-]?access[_-]?key|access[_-]?token|auth[_-]?token|"
    r"refresh[_-]?token|private[_-]?key)\b[\"']?[ \t]*[:=][ \t]*[\"']?"
    r"([^\s\"',;<>]{8,256})"
)
_RANDOM = r"[A-Za-z0-9+/_=-]{24,256}"  # a token that may be random (its entropy decides)

_PERSONAL = {
    "email": r"\b[A-Za-z0-9._%+-]{1,64}@(?:[A-Za-z0-9-]{1,63}\.){1,8}[A-Za-z]{2,24}\b",
    "iban": r"\b[A-Z]{2}[0-9]{2}(?:[ ]?[A-Z0-9]{4}){2,7}(?:[ ]?[A-Z0-9]{1,3})?\b",
    "card_number": r"\b[3-6][0-9](?:[ -]?[0-9]){11,17}\b",
    "phone": (
        r"(?:\+[1-9][0-9]{0,2}[ .-]?(?:\([0-9]{1,4}\)[ .-]?)?[0-9]{1,4}(?:[ .-]?[0-9]{2,4}){2,4}"
        r"|\([2-9][0-9]{2}\)[ ]?[2-9][0-9]{2}[-. ][0-9]{4}"
        r"|\b[2-9][0-9]{2}[-.][2-9][0-9]{2}[-.][0-9]{4})\b"
    ),
    "us_ssn": r"\b[0-8][0-9]{2}-[0-9]{2}-[0-9]{4}\b",
}

_QUALIFIER = (
    r"(?:all|any|every|each|the|your|my|these|those|previous|prior|above|earlier|preceding|"
    r"former|initial|original|foregoing|system|developer|other|old)"
)
_ORDERS = (
    r"(?:instructions?|prompts?|directions?|directives?|rules|guidelines|commands?|orders|"
    r"context|programming|guardrails|restrictions|constraints|policies|safety)"
)
_INJECTION = {
    "ignore_instructions": (
        r"(?i)\b(?:ignore|disregard|forget|override|bypass|neglect|overlook|drop|abandon)\b"
        rf"[ \t,]+(?:(?:all|of|the|any|and|following|everything|what|you|were|told|that|"
        rf"was|said)[ \t,]+){{0,4}}{_QUALIFIER}\b[^.\n]{{0,40}}?\b{_ORDERS}\b"
    ),
    "forget_everything": (
        r"(?i)\b(?:forget|ignore|disregard)[ \t]+(?:about[ \t]+)?"
        r"(?:everything|all(?:[ \t]+of[ \t]+it)?|that)[ \t]*"
        r"(?:above|before|said|you(?:'ve| have)?[ \t]+(?:been[ \t]+told|learned|read))"
    ),
    "new_role": (
        r"(?i)\b(?:you[ \t]+are[ \t]+(?:now|no[ \t]+longer)[ \t]+(?:an?[ \t]+|the[ \t]+|in[ \t]+)?"
        r"|from[ \t]+now[ \t]+on,?[ \t]+you[ \t]+(?:are|will|must|shall)\b"
        r"|pretend[ \t]+(?:that[ \t]+)?you[ \t]+(?:are|have)[ \t]+no[ \t]+"
        r"|act[ \t]+as[ \t]+(?:an?[ \t]+)?(?:unrestricted|unfiltered|uncensored|jailbroken|evil)"
        r"|\bdo[ \t]+anything[ \t]+now\b|\bDAN[ \t]+mode\b|\bdeveloper[ \t]+mode[ \t]+"
        r"(?:enabled|on)\b|\bjailbreak(?:ed|ing)?\b)"
    ),
    "new_instructions": (
        r"(?i)(?:\b(?:new|updated|real|actual|true|revised|additional|important|urgent)"
        r"[ \t]+(?:system[ \t]+)?instructions?[ \t]*:"
        r"|\bsystem[ \t]+(?:prompt|message|override|instruction)[ \t]*:"
        r"|\binstead,?[ \t]+(?:you[ \t]+(?:must|should|will)|do[ \t]+the[ \t]+following)\b)"
    ),
    "reveal_prompt": (
        r"(?i)(?:\b(?:reveal|print|show|repeat|output|display|tell[ \t]+me|leak|disclose|"
        r"write[ \t]+(?:out|down)|spell[ \t]+out|encode|translate|see|share)\b[^.\n]{0,30}?"
        r"\b(?:system"
        r"[ \t]*prompt|initial[ \t]+prompt|(?:your|the)[ \t]+(?:original[ \t]+|hidden[ \t]+|"
        r"secret[ \t]+)?(?:instructions|prompt|rules|password))\b"
        r"|\b(?:your|my)[ \t]+(?:initial|starting|original|system|hidden|secret|first|"
        r"developer)[ \t]+(?:prompt|instructions?|message|configuration|directives|rules)\b"
        r"|\bthe[ \t]+system[ \t]+prompt[ \t]+is\b|\bsystemPrompt\b|\binitiali[sz]ation"
        r"[ \t]+string\b|\bwhat[ \t]+were[ \t]+you[ \t]+told\b|\bi[ \t]+was[ \t]+instructed"
        r"[ \t]+to\b|\bmy[ \t]+instructions[ \t]+are\b|\b(?:text|everything|conversation)"
        r"[^.\n]{0,20}\b(?:above|so[ \t]+far)\b[^.\n]{0,30}\b(?:in[ \t]+full|verbatim|"
        r"word[ \t]+for[ \t]+word)\b|\brepeat\b[^.\n]{0,30}?\b(?:the[ \t]+above|this[ \t]+"
        r"(?:entire[ \t]+|whole[ \t]+)?conversation|everything[ \t]+(?:above|before))\b)"
    ),
    "hide_from_user": (
        r"(?i)\b(?:do[ \t]+not|don't|never|without)[ \t]+(?:tell|telling|inform|informing|"
        r"mention|mentioning|reveal|revealing|alert|alerting|notify|notifying)\b[^.\n]{0,20}?"
        r"\b(?:the[ \t]+)?user\b"
    ),
    "ignore_then_act": (
        r"(?i)\b(?:ignore|disregard|forget|skip)\b[^.\n]{0,60}?\band[ \t]+(?:instead[ \t]+|"
        r"just[ \t]+|only[ \t]+)?(?:print|say|output|reply|respond|write|repeat|return|type|"
        r"tell|show|translate|spell)\b"
    ),
    "ignore_data": (
        r"(?i)\b(?:ignore|disregard)[ \t]+(?:all|any|the[ \t]+rest[ \t]+of|everything[ \t]+in)"
        r"[ \t]+(?:this[ \t]+|the[ \t]+|other[ \t]+)?(?:info|information|data|content|text|"
        r"documents?|context)\b"
    ),
    "say_exactly": (
        r"(?i)(?:\b(?:just|only|simply)[ \t]+(?:print|say|output|write|reply[ \t]+with|"
        r"respond[ \t]+with)[ \t]*:?[ \t]*[\"'\x{201c}]"
        r"|\b(?:reply|respond|answer)[ \t]+(?:with[ \t]+)?only[ \t]+(?:with[ \t]+)?"
        r"(?:the[ \t]+following|this)\b|\bstop[ \t]+everything\b)"
    ),
    "addressed_to_ai": (
        r"(?i)(?:\bif[ \t]+you[ \t]+are[ \t]+an?[ \t]+(?:AI|LLM|language[ \t]+model|assistant|"
        r"chatbot|agent|bot)\b|\b(?:note|message|instructions?|attention)[ \t]+(?:to|for)"
        r"[ \t]+(?:the[ \t]+|any[ \t]+|all[ \t]+)?(?:AI|LLM|assistant|language[ \t]+model|"
        r"chatbot|agent)s?\b|\b(?:visible|readable)[ \t]+(?:only[ \t]+)?(?:to|for)[ \t]+"
        r"(?:the[ \t]+)?(?:LLMs?|AIs?|language[ \t]+models?|assistants?)\b"
        r"|\binvisible[ \t]+to[ \t]+humans\b)"
    ),
    "override_mode": (
        r"(?i)\b(?:admin(?:istrator)?|developer|root|sudo|god|debug|maintenance|system)"
        r"[ \t]+(?:mode|override)\b"
    ),
    "template_marker": (
        r"<\|(?:im_start|im_end|system|user|assistant|endoftext|begin_of_text|"
        r"start_header_id|end_header_id|eot_id)\|>|\[/?INST\]|<</?SYS>>"
        r"|</?(?:system|tool_result|function_results|instructions)>"
        r"|(?m:^[ \t]*(?:#{2,3}[ \t]*)?(?:SYSTEM|System|Assistant|ASSISTANT|Human|HUMAN)"
        r"[ \t]*:)"
    ),
    "ignore_instructions_de": (
        r"(?i)\b(?:ignoriere|ignorieren[ \t]+sie|vergiss|vergessen[ \t]+sie|missachte)\b"
        r"[^.\n]{0,40}?\b(?:anweisungen|anordnungen|befehle|vorgaben|regeln|alles|"
        r"instruktionen|aufgaben)\b"
    ),
    "ignore_instructions_fr": (
        r"(?i)\b(?:ignore[zs]?|oublie[zs]?)\b[^.\n]{0,30}?\b(?:instructions|consignes|"
        r"règles|regles|tout[ \t]+ce[ \t]+qui)\b"
    ),
    "ignore_instructions_es": (
        r"(?i)\b(?:ignora|ignore|olvida|olvide)\b[^.\n]{0,30}?\b(?:instrucciones|"
        r"indicaciones|reglas|todo[ \t]+lo[ \t]+anterior)\b"
    ),
}


# Where a pattern takes a space between the parts of what it finds, any whitespace is
# taken (a line break, a tab: the spaces are folded for the model), and the bounded gaps
# of a phrasing run across lines.
_SPACES = {
    "[ \\t]": "\\s",
    "[ \\t,]": "[\\s,]",
    "[ ]": "\\s",
    "[ -]": "[\\s-]",
    "[ .-]": "[\\s.-]",
    "[-. ]": "[-.\\s]",
    "[^.\\n]": "[^.]",
}


def _any_space(patterns: dict[str, str]) -> dict[str, str]:
    """The patterns with any whitespace where they take a space (``_SPACES``)."""
    found = {}
    for name, pattern in patterns.items():
        for narrow, wide in _SPACES.items():
            pattern = pattern.replace(narrow, wide)
        found[name] = pattern
    return found


def _combined(patterns: dict[str, str]) -> Any:
    return re2.compile("|".join(f"(?P<{name}>{p})" for name, p in patterns.items()), _OPTIONS)


def _luhn(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if index % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _iban(text: str) -> bool:
    compact = "".join(text.split())
    if not 15 <= len(compact) <= 34:
        return False
    moved = compact[4:] + compact[:4]
    number = "".join(str(int(char, 36)) for char in moved)
    return int(number) % 97 == 1


def _random_looking(token: str) -> bool:
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


_CHECKS: dict[str, Callable[[str], bool]] = {
    "card_number": lambda found: 13 <= len(_digits(found)) <= 19 and _luhn(_digits(found)),
    "iban": _iban,
    "phone": lambda found: 8 <= len(_digits(found)) <= 15,
    "us_ssn": lambda found: not found.startswith(("000", "666")) and found[4:6] != "00",
}

# What the detectors look through, each a match of one pattern (a char or an escape):
# invisible format characters an attacker splits words with (zero-width spaces, joiners,
# soft hyphens, word joiners, bidi marks), JSON escapes (a result that is JSON text holds
# a nested document's quotes as ``\"``, any character as ``\u0041``: read decoded, as the
# model reads them), and every character past ASCII (compatibility forms folded by NFKC:
# a full-width ``IGNORE`` (U+FF29…) is ``IGNORE``; any space a space).
# (Python's own engine: its alternatives start with distinct characters and repeat
# nothing nested, so it runs in linear time, and it is far cheaper per match than RE2's
# binding, where a text holds a match every few characters.)
_LOOKED_THROUGH = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"  # an escaped pair
    r"|\\u[0-9a-fA-F]{4}|\\[nrtbf\"/\\]|[^\x00-\x7f]+|[ \t\n\r\f\v]{2,}"
)
_HIDDEN = frozenset(
    "\u00ad\u180e\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
    "\u2060\u2061\u2062\u2063\u2064\ufeff"
)
_SIMPLE_ESCAPES = {"n": " ", "r": " ", "t": " ", "b": "", "f": " ", '"': '"', "/": "/", "\\": "\\"}


def _folded(run: str) -> tuple[str, list[int], list[int]] | None:
    """A run of characters past ASCII as read, with where each read character starts
    and ends in the run; None when it reads as it is, or one for one (``""``, no spans:
    most text in any script, and full-width forms, take one check for the run)."""
    if _HIDDEN.isdisjoint(run):
        folded = unicodedata.normalize("NFKC", run)  # a no-break space is a space too
        if folded == run:
            return None
        if len(folded) == len(run):
            return folded, [], []
    read: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    for index, char in enumerate(run):
        piece = _read(char)
        read.append(piece)
        starts += [index] * len(piece)
        ends += [index + 1] * len(piece)
    return "".join(read), starts, ends


def _read(piece: str) -> str:
    """One char or escape as the detectors read it ('' for nothing)."""
    if piece.startswith("\\"):
        if piece[1] != "u":
            return _SIMPLE_ESCAPES[piece[1]]
        units = [int(piece[i + 2 : i + 6], 16) for i in range(0, len(piece), 6)]
        if len(units) == 2:
            piece = chr(0x10000 + ((units[0] - 0xD800) << 10) + (units[1] - 0xDC00))
        elif 0xD800 <= units[0] <= 0xDFFF:  # half a pair: nothing a model reads
            return ""
        else:
            piece = chr(units[0])
        if piece.isascii():
            return " " if piece in "\n\r\t" else piece
    if piece in _HIDDEN:
        return ""
    if piece.isspace():
        return " "
    return unicodedata.normalize("NFKC", piece)


class Detectors:
    """The built-in detectors, compiled once per gateway."""

    @staticmethod
    def normalises(text: str) -> bool:
        """Whether ``text`` is read other than as it is (its reading costs a step per
        escape, run of spaces or run past ASCII: a caller may do it off the loop)."""
        return _LOOKED_THROUGH.search(text) is not None

    def __init__(self) -> None:
        self._secrets = _combined(_any_space(_SECRETS))
        self._assigned = re2.compile(_any_space({"": _ASSIGNED})[""], _OPTIONS)
        self._random = re2.compile(_RANDOM, _OPTIONS)
        self._personal = _combined(_any_space(_PERSONAL))
        self._injection = _combined(_any_space(_INJECTION))

    def find(self, text: str, kinds: Iterable[Detector]) -> list[Finding]:
        """What the detectors of ``kinds`` find in ``text``, in order, overlaps merged
        to the first found."""
        seen, positions = _normalised(text)
        found: list[Finding] = []
        for kind in kinds:
            if kind == "secrets":
                found += self._find_secrets(seen)
            elif kind == "personal_data":
                found += self._find(self._personal, seen, "personal_data")
            else:
                found += self._find(self._injection, seen, "injection")
        if positions is not None:
            found = [_placed(f, positions, len(text)) for f in found]
        return _merged(found)

    def _find(self, pattern: Any, text: str, kind: Detector) -> list[Finding]:
        found = []
        for match in pattern.finditer(text):
            label = match.lastgroup
            check = _CHECKS.get(label)
            if check is not None and not check(match.group()):
                continue
            found.append(Finding(kind, label, *match.span()))
        return found

    def _find_secrets(self, text: str) -> list[Finding]:
        found = self._find(self._secrets, text, "secrets")
        for match in self._assigned.finditer(text):
            found.append(Finding("secrets", "secret_setting", *match.span(1)))
        for match in self._random.finditer(text):
            if _random_looking(match.group()):
                found.append(Finding("secrets", "high_entropy", *match.span()))
        return found


def _normalised(text: str) -> tuple[str, tuple[list[int], list[int]] | None]:
    """``text`` as the detectors read it, one normalisation for every source and path:
    escapes decoded, invisible characters left out, spaces folded, compatibility forms
    folded (NFKC); and where each character read starts and ends in ``text`` (None when
    the text is read as it is)."""
    if _LOOKED_THROUGH.search(text) is None:
        return text, None
    kept: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    at = 0
    for match in _LOOKED_THROUGH.finditer(text):
        start, end = match.span()
        kept.append(text[at:start])
        starts += range(at, start)
        ends += range(at + 1, start + 1)
        piece = match.group()
        if piece.isspace() and piece.isascii():  # a run of spaces: one
            kept.append("\n" if "\n" in piece else " ")
            starts.append(start)
            ends.append(end)
        elif piece[0] != "\\":  # characters past ASCII
            folded = _folded(piece)
            if folded is None or (not folded[1] and len(folded[0]) == len(piece)):
                kept.append(piece if folded is None else folded[0])
                starts += range(start, end)
                ends += range(start + 1, end + 1)
            else:
                kept.append(folded[0])
                starts += [start + a for a in folded[1]]
                ends += [start + b for b in folded[2]]
        else:
            read = _read(piece)
            kept.append(read)
            starts += [start] * len(read)
            ends += [end] * len(read)
        at = end
    kept.append(text[at:])
    starts += range(at, len(text))
    ends += range(at + 1, len(text) + 1)
    return "".join(kept), (starts, ends)


def _placed(finding: Finding, spans: tuple[list[int], list[int]], size: int) -> Finding:
    starts, ends = spans
    start = starts[finding.start] if finding.start < len(starts) else size
    end = ends[finding.end - 1] if finding.end > 0 else start
    return Finding(finding.kind, finding.label, start, max(start, end))


def _merged(found: list[Finding]) -> list[Finding]:
    """In order of position; a finding inside or across an earlier one is left out."""
    merged: list[Finding] = []
    for finding in sorted(found, key=lambda f: (f.start, -f.end)):
        if merged and finding.start < merged[-1].end:
            continue
        merged.append(finding)
    return merged


def redacted(text: str, found: Iterable[Finding]) -> str:
    """``text`` with each span found replaced by ``[redacted: <label>]``."""
    pieces, at = [], 0
    for finding in sorted(found, key=lambda f: f.start):
        if finding.start < at:
            continue
        pieces += [text[at : finding.start], f"[redacted: {finding.label}]"]
        at = finding.end
    pieces.append(text[at:])
    return "".join(pieces)
