"""Finding the tools that fit a request (DESIGN.md §17): a BM25 index over a catalog's
tools, built once per registry (off the event loop: it grows with the catalog) and
searched per request among the tools that request may use.

A tool is indexed by its name split into words (``crm_findCustomer`` → crm, find,
customer), twice, for a name says most; its description; its parameters' names and
descriptions; and its source (``openapi:crm``). Scoring is bm25s's (Lucene's BM25).

Everything indexed comes from operators' files, imported documents and MCP servers, and
every query from a model: all hostile text. Words are letters and digits only (nothing
is ever interpreted), a tool gives at most ``TOOL_WORDS`` words (of at most
``TEXT_CHARS`` characters of each of its texts) and a query at most
``QUERY_WORDS`` distinct ones read from its first ``QUERY_CHARS`` characters, so no
query, however large, takes longer than a few, and no tool's text can make it match
everything (BM25 discounts a long text's words, and it cannot grow past the cap).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Iterator
from typing import Any

import bm25s
import numpy as np

from .tool import Tool

TOOL_WORDS = 512  # the most words one tool is indexed under
TEXT_CHARS = 16_384  # the most characters of one of its texts read
QUERY_WORDS = 64  # the most distinct words of a query that count
QUERY_CHARS = 4096  # the most characters of a query read
_MASKS_KEPT = 64  # masks of distinct allowlists kept (tenants repeat theirs)

_WORD = re.compile(r"[^\W_]+")  # letters and digits, in any script
_CAMEL = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")  # of an ASCII word
_STOP = frozenset(
    {
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "has",
        "have",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "was",
        "were",
        "will",
        "with",
    }
)


def words(text: str) -> Iterator[str]:
    """The words of ``text``, lower-cased, camel case and snake case split."""
    for word in _WORD.findall(text):
        split = word.isascii() and not word.islower()
        for part in _CAMEL.findall(word) if split else (word,):
            lowered = part.lower()
            if len(lowered) > 1 and lowered not in _STOP:
                yield lowered


def _schema_text(schema: Any, depth: int = 0) -> Iterator[str]:
    """A JSON Schema's property names and descriptions, nested ones too (a bounded
    walk: an imported schema is hostile)."""
    if not isinstance(schema, dict) or depth > 4:
        return
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for name, inner in properties.items():
            yield str(name)
            if isinstance(inner, dict):
                about = inner.get("description")
                if isinstance(about, str):
                    yield about
                yield from _schema_text(inner, depth + 1)
    items = schema.get("items")
    if isinstance(items, dict):
        yield from _schema_text(items, depth + 1)


def tool_words(tool: Tool) -> list[str]:
    """What ``tool`` is found by, at most ``TOOL_WORDS`` words."""
    definition = tool.definition
    name = list(words(tool.name))
    texts = [definition.description or "", *_schema_text(definition.parameters), tool.label]
    found = [*name, *name]
    for text in texts:
        found.extend(words(text[:TEXT_CHARS]))
        if len(found) >= TOOL_WORDS:
            break
    return found[:TOOL_WORDS]


def query_words(query: str) -> list[str]:
    """A query's distinct words (each counts once), at most ``QUERY_WORDS``."""
    return list(dict.fromkeys(words(query[:QUERY_CHARS])))[:QUERY_WORDS]


class ToolIndex:
    """A catalog's tools, searchable. Immutable once built: a changed catalog is a new
    index (one per snapshot)."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        """Index ``tools`` (blocking, and growing with the catalog: build it off the
        event loop)."""
        listed = list(tools)
        self.names = tuple(tool.name for tool in listed)
        self._where = {name: index for index, name in enumerate(self.names)}
        self._bm25 = bm25s.BM25()
        corpus = [tool_words(tool) or ["\x00"] for tool in listed]  # "\x00": no word found
        self._vocabulary: frozenset[str] = frozenset()
        if corpus:
            self._bm25.index(corpus, show_progress=False)
            self._vocabulary = frozenset(self._bm25.vocab_dict)
        self._masks: dict[frozenset[str], Any] = {}

    def __len__(self) -> int:
        return len(self.names)

    def _mask(self, allowed: Collection[str]) -> Any:
        """1.0 for each tool in ``allowed``, 0.0 for the rest (kept per allowlist)."""
        key = allowed if isinstance(allowed, frozenset) else frozenset(allowed)
        mask = self._masks.get(key)
        if mask is None:
            mask = np.zeros(len(self.names), dtype=np.float32)
            for name in key:
                index = self._where.get(name)
                if index is not None:
                    mask[index] = 1.0
            if len(self._masks) >= _MASKS_KEPT:
                self._masks.clear()
            self._masks[key] = mask
        return mask

    def search(self, query: str, limit: int, allowed: Collection[str] | None = None) -> list[str]:
        """The names of the tools that best match ``query``, best first, at most
        ``limit``, only among ``allowed`` (None: every tool); a tool that matches no
        word of the query is never found."""
        if limit < 1 or not self.names:
            return []
        found = [word for word in query_words(query) if word in self._vocabulary]
        if not found:
            return []
        mask = self._mask(allowed) if allowed is not None else None
        scores = np.asarray(self._bm25.get_scores(found, weight_mask=mask))
        matching = np.flatnonzero(scores > 0)
        if len(matching) > limit:
            best = np.argpartition(-scores[matching], limit - 1)[:limit]
            matching = matching[best]
        ranked = sorted(matching.tolist(), key=lambda index: (-scores[index], index))
        return [self.names[index] for index in ranked]
