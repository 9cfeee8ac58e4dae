"""The built-in guardrail detectors (docs/guardrails.md): cheap, local, and linear in the
text. Every pattern runs on RE2, so no text — a tool's, a model's, a client's — can make
a search backtrack; what a pattern finds is checked further in Python where a shape alone
says too little (``shapes``).

- ``secrets``: private key blocks, the shapes of well-known keys and tokens, a
  secret-named setting's value, long random-looking strings (``shapes``);
- ``personal_data``: email addresses (any script), phone numbers, card numbers that pass
  Luhn, IBANs of their country's length that pass mod 97, US social security numbers
  (``shapes``);
- ``injection``: known phrasings that tell a model to drop its instructions, take a new
  role, reveal its prompt or hide what it does, and chat-template markers, in English and
  fifteen other languages (``phrasings``);
- ``links``: images and links whose address would carry data to a host outside the
  guardrail's ``hosts`` (``links``).

Every detector reads one normalisation of the text (``reading``), whatever its source or
path — escapes and encodings decoded, invisible characters looked through, spaces folded,
compatibility forms, accents and lookalike letters folded — and a span found is the
original text's. A secret-shaped token split by a line break (two content blocks of an
MCP result, a key wrapped over lines) is read joined as well.
What they miss is in the docs: paraphrase, encodings other than those read (base64,
leetspeak), and secrets with no known shape and little entropy.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Sequence
from typing import Any

import re2

from gateway.config import Detector
from gateway.policy.links import found_links
from gateway.policy.phrasings import INJECTION
from gateway.policy.reading import Positions, fold, normalised, normalises
from gateway.policy.shapes import ASSIGNED, CHECKS, PERSONAL, RANDOM, SECRETS, random_looking
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
    "[^.!?\\n]": "[^.!?]",
    "[^.\\n،]": "[^.،]",
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
    """One RE2 of ``patterns``, each its named group, written as the text is read."""
    joined = "|".join(f"(?P<{name}>{fold(p)})" for name, p in patterns.items())
    return re2.compile(joined, _OPTIONS)


# A token's characters either side of a line break: read joined too.
# A line break between two of a token's characters (Python's engine, for its look-around:
# each break is found, however close the next; no part of it repeats, so it is linear).
_SPLIT = re.compile(r"(?<=[A-Za-z0-9_+/=-])\n(?=[A-Za-z0-9_+/=-])")


class Detectors:
    """The built-in detectors, compiled once per gateway."""

    normalises = staticmethod(normalises)

    def __init__(self) -> None:
        self._secrets = _combined(_any_space(SECRETS))
        self._assigned = re2.compile(_any_space({"": ASSIGNED})[""], _OPTIONS)
        self._random = re2.compile(RANDOM, _OPTIONS)
        self._personal = _combined(_any_space(PERSONAL))
        self._injection = _combined(_any_space(INJECTION))

    def find(
        self, text: str, kinds: Iterable[Detector], hosts: Sequence[str] = ()
    ) -> list[Finding]:
        """What the detectors of ``kinds`` find in ``text``, in order, overlaps merged
        to the first found (``hosts``: where the ``links`` detector lets data go)."""
        seen, positions = normalised(text)
        found: list[Finding] = []
        for kind in kinds:
            if kind == "secrets":
                found += self._find_secrets(seen)
            elif kind == "personal_data":
                found += self._find(self._personal, seen, "personal_data")
            elif kind == "links":
                found += [
                    Finding("links", f.label, f.start, f.end) for f in found_links(seen, hosts)
                ]
            else:
                found += self._find(self._injection, seen, "injection")
        if positions is not None:
            found = [_placed(f, positions, len(text)) for f in found]
        return _merged(found)

    def _find(self, pattern: Any, text: str, kind: Detector) -> list[Finding]:
        found = []
        for match in pattern.finditer(text):
            label = match.lastgroup
            check = CHECKS.get(label)
            if check is not None and not check(match.group()):
                continue
            found.append(Finding(kind, label, *match.span()))
        return found

    def _find_secrets(self, text: str) -> list[Finding]:
        found = self._find(self._secrets, text, "secrets")
        for match in self._assigned.finditer(text):
            found.append(Finding("secrets", "secret_setting", *match.span(1)))
        for match in self._random.finditer(text):
            if random_looking(match.group()):
                found.append(Finding("secrets", "high_entropy", *match.span()))
        if "\n" in text and _SPLIT.search(text) is not None:
            found += self._across_lines(text)
        return found

    def _across_lines(self, text: str) -> list[Finding]:
        """The key and token shapes a line break splits (a model reads the two halves as
        one): found in the text with those breaks left out, placed back across them."""
        breaks = [m.start() for m in _SPLIT.finditer(text)]
        joined = _SPLIT.sub("", text)
        # Where each break stood in the joined text: the character after it.
        at = [where - n for n, where in enumerate(breaks)]
        found = []
        for finding in self._find(self._secrets, joined, "secrets"):
            before = bisect.bisect_right(at, finding.start)
            inside = bisect.bisect_left(at, finding.end)
            if inside > before:  # it spans a break
                found.append(
                    Finding("secrets", finding.label, finding.start + before, finding.end + inside)
                )
        return found


def _placed(finding: Finding, spans: Positions, size: int) -> Finding:
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
