"""Which tools produce another tool's arguments (docs/tools.md, "Tool search").

A task's steps are not all named: a hotel search needs a destination id that only a
destination search gives, a weather call the coordinates a geocoder gives. Tool search
brings such producers along with the tools it selects. A tool P produces an argument of
a tool C, both of one source (an OpenAPI document, an MCP server, one YAML file's kind),
when one of C's required parameters is

1. a field of what P answers (its ``returns`` schema: an MCP output schema, an OpenAPI
   response body): named alike (``access_token``; ``travel_cost`` in
   ``travel_cost_list``), or named in the parameter's description (``receiver_id``:
   "User ID of the user" and a ``user_id`` field);
2. said to come from P: the parameter's description names P (``dest_id``: "retrieve it
   from Search Hotel Destination");
3. an identifier (``dest_id``, ``cityCode``) with no field to match, and P looks it up:
   P's name starts with a look-up verb (search, find, list, get…) and holds the
   identifier's noun (``searchHotelDestination`` for ``dest``), and P does not need the
   identifier itself;

or P's source links its answer to C (OpenAPI links: ``feeds``). A tool needing what it
produces itself is no producer of it. At most ``PRODUCERS`` producers a tool, strongest
rule first. Everything read is hostile text: the walks are bounded, and the work per
source grows with its tools and their fields, not with pairs of tools.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any

from .tool import Tool

PRODUCERS = 3  # the most producers one tool brings along
CROWD = 8  # a field (or a look-up noun) that more tools of a source answer says nothing
_FIELDS = 64  # of a tool's answer, the most fields read
_DEPTH = 3  # how deep a schema's fields are read
_ANSWER_FIELDS = 256  # of a tool's answer, the most fields read in all
_DESCRIBED_WORDS = 512  # of a tool's parameters' descriptions, the most words read in all
_MENTION_WORDS = 4  # the longest tool name looked for in a description, in words
_GENERIC = frozenset(
    {"id", "name", "type", "valu", "data", "result", "query", "text", "messag", "content"}
)  # field names too common to say what produced them (stemmed)
_IDENTIFIERS = frozenset({"id", "ids", "code", "key", "token", "uuid", "slug"})
_LOOKUPS = frozenset(
    {"search", "find", "list", "get", "lookup", "look", "resolv", "fetch", "queri", "retriev"}
)


def _fields(schema: Any, depth: int = 0) -> Iterator[str]:
    """The property names of an answer's schema, nested ones and items' too."""
    if not isinstance(schema, Mapping) or depth > _DEPTH:
        return
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        for name, inner in islice(properties.items(), _FIELDS):
            yield str(name)
            yield from _fields(inner, depth + 1)
    items = schema.get("items")
    if isinstance(items, Mapping):
        yield from _fields(items, depth + 1)


def _required(tool: Tool) -> list[tuple[str, str]]:
    """A tool's required parameters: each name and description."""
    schema = tool.definition.parameters or {}
    properties = schema.get("properties")
    required = schema.get("required")
    if not isinstance(properties, Mapping) or not isinstance(required, list):
        return []
    out = []
    for name in required[:_FIELDS]:
        inner = properties.get(name) if isinstance(name, str) else None
        if isinstance(inner, Mapping):
            about = inner.get("description")
            out.append((name, about[:1024] if isinstance(about, str) else ""))
    return out


def _runs(words: Sequence[str], longest: int) -> Iterator[tuple[str, ...]]:
    """Every run of up to ``longest`` consecutive words."""
    for start in range(len(words)):
        for end in range(start + 1, min(start + longest, len(words)) + 1):
            yield tuple(words[start:end])


def producers(tools: Iterable[Tool], split: Any) -> dict[str, tuple[str, ...]]:
    """Each tool's producers (only tools that have any), strongest first; ``split`` a
    text's words (``search.words``)."""
    by_source: dict[str, list[Tool]] = defaultdict(list)
    for tool in tools:
        by_source[tool.label].append(tool)
    found: dict[str, tuple[str, ...]] = {}
    for listed in by_source.values():
        found.update(_of_source(listed, split))
    return found


def _of_source(tools: list[Tool], split: Any) -> dict[str, tuple[str, ...]]:
    named = {tool.name: tool for tool in tools}
    needs = {tool.name: _required(tool) for tool in tools}
    needed = {name: {p for p, _ in params} for name, params in needs.items()}
    # What each tool answers, by a field's words, and by any one of its fields' words.
    by_field: dict[tuple[str, ...], list[str]] = defaultdict(list)
    by_word: dict[str, dict[str, None]] = defaultdict(dict)  # an ordered set of names
    answers: dict[str, list[frozenset[str]]] = defaultdict(list)  # a tool's fields' words
    for tool in tools:
        for field in dict.fromkeys(islice(_fields(tool.returns), _ANSWER_FIELDS)):
            key = tuple(split(field))
            if key and (len(key) > 1 or key[0] not in _GENERIC):
                by_field[key].append(tool.name)
                answers[tool.name].append(frozenset(key))
                for word in key:
                    by_word[word][tool.name] = None
    by_name: dict[tuple[str, ...], str] = {}
    lookups: dict[str, dict[str, None]] = defaultdict(
        dict
    )  # a look-up tool, by its name's words' starts
    for tool in tools:
        key = tuple(split(tool.name))
        if 1 < len(key) <= _MENTION_WORDS:
            by_name.setdefault(key, tool.name)
        if key and key[0] in _LOOKUPS:
            for word in dict.fromkeys(key[1:]):
                for end in range(min(3, len(word)), len(word) + 1):  # ``dest`` of ``destin``
                    lookups[word[:end]][tool.name] = None
    ranked: dict[str, dict[str, int]] = defaultdict(dict)  # consumer -> producer -> rule

    def add(consumer: str, producer: str, rule: int, param: str) -> None:
        if producer == consumer or param in needed.get(producer, ()):
            return
        kept = ranked[consumer]
        kept[producer] = min(rule, kept.get(producer, rule))

    for tool in tools:
        for producer in tool.feeds:
            if producer in named:
                add(producer, tool.name, 0, "")
    for consumer, params in needs.items():
        budget = _DESCRIBED_WORDS  # of a tool's parameters' descriptions, the words read
        for param, about in params:
            key = tuple(split(param))
            if not key:
                continue
            # 1. a field named alike: the same words, or the parameter's within a field's
            for producer in _few(by_field.get(key, ())):
                add(consumer, producer, 1, param)
            if len(key) > 1:
                wanted = frozenset(key)
                rarest = min((by_word.get(w, {}) for w in wanted), key=len)
                holders = [
                    name for name in _few(rarest) if any(wanted <= field for field in answers[name])
                ]
                for producer in holders:
                    add(consumer, producer, 2, param)
            described = list(islice(split(about), max(budget, 0)))
            budget -= len(described)
            for run in _runs(described, _MENTION_WORDS):
                # ... or a field named in the parameter's description
                if len(run) > 1 or run[0] in _IDENTIFIERS:
                    for producer in _few(by_field.get(run, ())):
                        add(consumer, producer, 2, param)
                # 2. a tool named in it
                producer_named = by_name.get(run)
                if producer_named is not None:
                    add(consumer, producer_named, 1, param)
            # 3. an identifier looked up by its noun
            if len(key) > 1 and key[-1] in _IDENTIFIERS:
                noun = key[-2]
                for producer in _looked_up(lookups, noun):
                    add(consumer, producer, 3, param)
    return {
        consumer: tuple(sorted(kept, key=lambda p: (kept[p], p))[:PRODUCERS])
        for consumer, kept in ranked.items()
        if kept
    }


def _few(names: Collection[str]) -> Collection[str]:
    """``names``, unless more than ``CROWD`` share the field: then none (a field that
    many tools answer does not say which one a tool needs)."""
    return names if len(names) <= CROWD else ()


def _looked_up(lookups: Mapping[str, dict[str, None]], noun: str) -> Collection[str]:
    """The look-up tools whose name holds ``noun``, or a word it begins (``dest`` of
    ``destin``)."""
    if len(noun) < 2:
        return []
    return _few(lookups.get(noun, {}))
