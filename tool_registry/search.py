"""Finding the tools that fit a request (docs/design.md §17): a BM25 index over a catalog's
tools, built once per registry (off the event loop: it grows with the catalog) and
searched per request among the tools that request may use.

A tool is indexed by its name split into words (``crm_findCustomer`` → crm, find,
customer), four times, for a name says most; its description, twice; its parameters'
names, descriptions and enumerated values (``cuisine: [Italian, Thai]``); and its
source (``openapi:crm``). Words are lower-cased, English ones stemmed (Snowball, by
PyStemmer: ``movies`` finds ``movie``), common English words left out, and runs of
Chinese, Japanese or Korean characters read as their character pairs. Scoring is
bm25s's (Lucene's BM25). ``bench/retrieval.py`` measures the choices on BFCL.

Everything indexed comes from operators' files, imported documents and MCP servers, and
every query from a model: all hostile text. Words are letters and digits only (nothing
is ever interpreted; a "word" longer than ``WORD_CHARS`` is none), a tool gives at most
``TOOL_WORDS`` words (of at most ``TEXT_CHARS`` characters of each of its texts) and a
query at most ``QUERY_WORDS`` distinct ones read from its first ``QUERY_CHARS``
characters, so no query, however large, takes longer than a few, and no tool's text can
make it match everything (BM25 discounts a long text's words, and it cannot grow past
the cap).

Nor can a tool's text be stuffed into every search: a description written of the
catalog's words (a hostile source's, to be offered in every first round) matches most
queries a little. A tool indexed under more distinct words than ``REACH_TIMES`` the
catalog's median has its score scaled down by as much (it pays for its reach), and a
preselection offers only tools whose score is at least ``FIT`` of the best one's (a
tool that merely shares a word or two with the conversation is filler); so does every
other ranking a model or an operator reads (the model's search, the console's find box).
``tests/tool_registry/test_search_stuffing.py`` holds both to the attack.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from functools import lru_cache
from typing import Any

from .definition import ToolDefinition
from .errors import ToolArgumentsInvalid
from .jsonio import dumps_text
from .producers import producers
from .results import ToolResult
from .tasks import Chosen, Pick, deal, parts
from .tool import CallContext, Effects, HttpRunner, PreparedCall, Tool

TOOL_WORDS = 512  # the most words one tool is indexed under
TEXT_CHARS = 16_384  # the most characters of one of its texts read
WORD_CHARS = 64  # a longer run of letters is no word
QUERY_WORDS = 64  # the most distinct words of a query that count
QUERY_CHARS = 4096  # the most characters of a query read
NAME_TIMES, DESCRIPTION_TIMES = 4, 2  # how much more a name's and a description's words weigh
ENUM_VALUES = 64  # of a parameter's enumerated values, the most read
_MASKS_KEPT = 64  # masks of distinct allowlists kept (tenants repeat theirs)
ABOUT_CHARS = 160  # of a tool's description, in a search's answer
SEARCH_TOOL = "toolgate_search_tools"  # the function the gateway answers itself
_SOURCES_NAMED = 8  # sources named in the search function's description, at most
_DECLARATION_BYTES = 36  # {"type":"function","function":{…}} around a definition
_FOUND_KEPT = 1024  # searches remembered by a search tool (they repeat across rounds)
_STEMS_KEPT = 1 << 16  # stemmed words remembered
_QUERIES_KEPT = 1024  # queries' words remembered
REACH_TIMES = 3  # distinct words past this many times the catalog's median cost a tool
FIT = 0.2  # of the best score, the least a preselected tool's may be
EMBEDDED_CHARS = 1024  # of a tool's description, the most embedded
CONTEXT = 0.5  # how much the whole request's score weighs beside a part's own
KIN_PICKS = 2  # tools of one source among the lead that bring the source's others
KIN_TOOLS = 24  # the most tools in play a source may have for them all to come
KIN_SCAN = 4096  # a source of more tools is never looked through for its kin
MEANING = 0.75  # how much the embeddings' score weighs beside BM25's
OFFLOADED_TOOLS = 1024  # a search among more tools runs in a worker thread
ALIKE = 0.7  # tools sharing this share of their distinct words are nearly one

_WORD = re.compile(r"[^\W_]+")  # letters and digits, in any script
_CAMEL = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")  # of an ASCII word
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_STEMMERS = threading.local()  # a PyStemmer stemmer is not to be shared by threads

# bm25s, NumPy and PyStemmer are imported when first used: a gateway (or a command)
# that searches no catalog does not pay for them at start.


@lru_cache(maxsize=1)
def _stop_words() -> frozenset[str]:
    """English words too common to find anything by (bm25s's list, and a few more)."""
    from bm25s.stopwords import STOPWORDS_EN_PLUS

    return frozenset(STOPWORDS_EN_PLUS) | {"has", "have", "its", "were"}


@lru_cache(maxsize=_STEMS_KEPT)
def _stem(word: str) -> str:
    stemmer = getattr(_STEMMERS, "english", None)
    if stemmer is None:
        import Stemmer

        stemmer = _STEMMERS.english = Stemmer.Stemmer("english")
    return str(stemmer.stemWord(word))


def words(text: str) -> Iterator[str]:
    """The words of ``text``: lower-cased, camel case and snake case split, stemmed,
    common ones left out; a run of CJK characters as its character pairs."""
    stop = _stop_words()
    for word in _WORD.findall(text):
        if len(word) > WORD_CHARS:
            continue
        if not word.isascii() and _CJK.search(word):
            if len(word) == 1:
                yield word
            for at in range(len(word) - 1):
                yield word[at : at + 2]
            continue
        split = word.isascii() and not word.islower()
        for part in _CAMEL.findall(word) if split else (word,):
            lowered = part.lower()
            if len(lowered) > 1 and lowered not in stop:
                yield _stem(lowered)


def _schema_text(schema: Any, depth: int = 0) -> Iterator[str]:
    """A JSON Schema's property names, descriptions and enumerated values, nested ones
    too (a bounded walk: an imported schema is hostile)."""
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
                values = inner.get("enum")
                if isinstance(values, list):
                    yield " ".join(v for v in values[:ENUM_VALUES] if isinstance(v, str))
                yield from _schema_text(inner, depth + 1)
    items = schema.get("items")
    if isinstance(items, dict):
        yield from _schema_text(items, depth + 1)


def tool_words(tool: Tool) -> list[str]:
    """What ``tool`` is found by, at most ``TOOL_WORDS`` words."""
    definition = tool.definition
    name = list(words(tool.name))
    described = list(words((definition.description or "")[:TEXT_CHARS]))
    found = name * NAME_TIMES + described * DESCRIPTION_TIMES
    for text in (*_schema_text(definition.parameters), tool.label):
        if len(found) >= TOOL_WORDS:
            break
        found.extend(words(text[:TEXT_CHARS]))
    return found[:TOOL_WORDS]


def one_line(description: str | None) -> str:
    """A description's first line or sentence, at most ``ABOUT_CHARS`` characters."""
    text = " ".join((description or "")[: ABOUT_CHARS * 4].split())
    end = text.find(". ")
    if 0 < end < ABOUT_CHARS:
        return text[: end + 1]
    return text if len(text) <= ABOUT_CHARS else text[: ABOUT_CHARS - 1].rstrip() + "…"


def definition_bytes(definition: ToolDefinition) -> int:
    """About how many bytes a definition takes where a request declares it."""
    shape = {
        "name": definition.name,
        "description": definition.description,
        "parameters": definition.parameters,
    }
    return len(dumps_text(shape).encode()) + _DECLARATION_BYTES


def query_words(query: str) -> tuple[str, ...]:
    """A query's distinct words (each counts once), at most ``QUERY_WORDS``."""
    return _query_words(query[:QUERY_CHARS])


@lru_cache(maxsize=_QUERIES_KEPT)
def _query_words(query: str) -> tuple[str, ...]:
    # A request's text is read several times (its parts, its scores, its recent words).
    return tuple(dict.fromkeys(words(query)))[:QUERY_WORDS]


class ToolIndex:
    """A catalog's tools, searchable. Immutable once built: a changed catalog is a new
    index (one per snapshot)."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        """Index ``tools`` (blocking, and growing with the catalog: build it off the
        event loop)."""
        listed = list(tools)
        self.names = tuple(tool.name for tool in listed)
        self.about = {tool.name: one_line(tool.description) for tool in listed}
        self.sources = {tool.name: tool.label for tool in listed}
        # What each definition weighs as JSON (about what a dialect declares it in).
        self.sizes = {tool.name: definition_bytes(tool.definition) for tool in listed}
        self._where = {name: index for index, name in enumerate(self.names)}
        import bm25s
        import numpy as np

        self._bm25 = bm25s.BM25()
        corpus = [tool_words(tool) or ["\x00"] for tool in listed]  # "\x00": no word found
        self._vocabulary: frozenset[str] = frozenset()
        if corpus:
            self._bm25.index(corpus, show_progress=False)
            self._vocabulary = frozenset(self._bm25.vocab_dict)
        # What each tool's score is scaled by: 1, unless its text reaches past
        # ``REACH_TIMES`` the median tool's distinct words.
        distinct = np.array([len(set(words)) for words in corpus], dtype=np.float32)
        most = REACH_TIMES * float(np.median(distinct)) if len(distinct) else 0.0
        self._reach = np.minimum(1.0, most / np.maximum(distinct, 1.0)).astype(np.float32)
        self._masks: dict[frozenset[str], Any] = {}
        self._vectors: Any = None  # each tool's unit vector, once an embeddings model gave them
        self._texts = {
            tool.name: f"{' '.join(_CAMEL.findall(tool.name)) or tool.name}: "
            f"{(tool.description or '')[:EMBEDDED_CHARS]}"
            for tool in listed
        }
        self._distinct = {
            tool.name: frozenset(found) for tool, found in zip(listed, corpus, strict=True)
        }
        self._members: dict[str, list[str]] = {}  # each source's tools
        for tool in listed:
            self._members.setdefault(tool.label, []).append(tool.name)
        # The tools that produce each tool's arguments (producers.py).
        self.producers = producers(listed, lambda text: list(words(text)))

    def __len__(self) -> int:
        return len(self.names)

    def _mask(self, allowed: Collection[str]) -> Any:
        """1.0 for each tool in ``allowed``, 0.0 for the rest (kept per allowlist)."""
        key = allowed if isinstance(allowed, frozenset) else frozenset(allowed)
        mask = self._masks.get(key)
        if mask is None:
            import numpy as np

            mask = np.zeros(len(self.names), dtype=np.float32)
            for name in key:
                index = self._where.get(name)
                if index is not None:
                    mask[index] = 1.0
            if len(self._masks) >= _MASKS_KEPT:
                self._masks.clear()
            self._masks[key] = mask
        return mask

    def scores(self, query: str, allowed: Collection[str] | None = None) -> Any:
        """Each tool's score for ``query`` (a NumPy array in the index's order; 0 for
        a tool outside ``allowed`` or matching no word of the query), or None when no
        word of the query is indexed."""
        if not self.names:
            return None
        found = [word for word in query_words(query) if word in self._vocabulary]
        if not found:
            return None
        mask = self._mask(allowed) if allowed is not None else None
        import numpy as np

        return np.asarray(self._bm25.get_scores(found, weight_mask=mask)) * self._reach

    def best(self, scores: Any, limit: int, at_least: float = 0.0) -> list[str]:
        """The names of the ``limit`` best-scoring tools, best first, each scoring more
        than 0 and at least ``at_least`` of the best score."""
        import numpy as np

        if scores is None or limit < 1:
            return []
        floor = at_least * float(scores.max()) if at_least > 0 else 0.0
        matching = np.flatnonzero(scores > floor) if floor > 0 else np.flatnonzero(scores > 0)
        if len(matching) > limit:
            top = np.argpartition(-scores[matching], limit - 1)[:limit]
            matching = matching[top]
        ranked = sorted(matching.tolist(), key=lambda index: (-scores[index], index))
        return [self.names[index] for index in ranked]

    def search(
        self,
        query: str,
        limit: int,
        allowed: Collection[str] | None = None,
        at_least: float = 0.0,
    ) -> list[str]:
        """The names of the tools that best match ``query``, best first, at most
        ``limit``, only among ``allowed`` (None: every tool), each scoring at least
        ``at_least`` of the best score; a tool that matches no word of the query is
        never found."""
        if limit < 1:
            return []
        return self.best(self.scores(query, allowed), limit, at_least)

    def has_words(self, text: str) -> bool:
        """Whether ``text`` holds a word some tool is indexed under."""
        return any(word in self._vocabulary for word in query_words(text))

    def alike(self, one: str, other: str) -> bool:
        """Whether two tools are nearly one: they share ``ALIKE`` of their words."""
        a, b = self._distinct.get(one, frozenset()), self._distinct.get(other, frozenset())
        return bool(a and b) and len(a & b) >= ALIKE * len(a | b)

    def parts(self, text: str) -> tuple[str, ...]:
        """A request's parts (``tasks.parts``) that hold a word some tool is indexed
        under."""
        return parts(text[:QUERY_CHARS], self.has_words)

    def fused(self, query: str, allowed: Collection[str] | None, meaning: Any = None) -> Any:
        """``query``'s scores: BM25's, scaled to its best, plus ``MEANING`` times the
        cosine of each tool's vector with ``meaning`` (the query's), scaled alike;
        None when neither finds anything."""
        near = None
        if meaning is not None and self._vectors is not None:
            near = self._vectors @ meaning
        return self._fused(self.scores(query, allowed), near, allowed)

    def _fused(self, words_: Any, near: Any, allowed: Collection[str] | None) -> Any:
        import numpy as np

        if words_ is not None:
            top = float(words_.max())
            words_ = words_ / top if top > 0 else None
        if near is None:
            return words_
        near = np.maximum(near, 0.0)
        if allowed is not None:
            near = near * self._mask(allowed)
        top = float(near.max())
        if top <= 0:
            return words_
        near = MEANING * near / top
        return near if words_ is None else words_ + near

    def _nears(self, texts: Sequence[str], meanings: Mapping[str, Any]) -> dict[str, Any]:
        """Each text's cosines with every tool, in one product (a text without a vector
        has none)."""
        import numpy as np

        if self._vectors is None:
            return {}
        held = [text for text in dict.fromkeys(texts) if meanings.get(text) is not None]
        if not held:
            return {}
        product = self._vectors @ np.stack([meanings[text] for text in held]).T
        return {text: product[:, at] for at, text in enumerate(held)}

    def choose(
        self,
        text: str,
        limit: int,
        allowed: Collection[str] | None = None,
        at_least: float = 0.0,
        meanings: Mapping[str, Any] | None = None,
        cut: tuple[str, ...] | None = None,
        lead: int = 0,
        whole_ranked: bool = True,
    ) -> Chosen:
        """The tools for a request's parts (``tasks.py``): each part's best matches dealt
        round by round, each with its producers, at most ``limit``. ``meanings``: the
        vectors of the text and its parts, where an embeddings model gave them;
        ``lead``: how many of the whole text's best come first (then, where the lead
        holds ``KIN_PICKS`` tools of one small source, that source's other tools:
        ``kin``); ``whole_ranked``: whether the whole text is ranked beside its parts
        (else only they are)."""
        cut = self.parts(text) if cut is None else cut
        nears = self._nears((text, *cut), meanings or {})
        whole = self._fused(self.scores(text, allowed), nears.get(text), allowed)
        if whole is None:
            return Chosen((), ())
        whole = whole / float(whole.max())
        ranked = [self.best(whole, limit, at_least)]
        if len(cut) > 1:  # each part's words, in the light of the whole request's
            import numpy as np

            if not whole_ranked:
                ranked = [[]]
            context = CONTEXT * whole
            for part in cut:
                own = self._fused(self.scores(part, allowed), nears.get(part), allowed)
                if own is None:
                    ranked.append([])
                    continue
                # Among the tools the part itself finds, the whole request breaks ties.
                mixed = np.where(own > 0, own / own.max() + context, 0.0)
                ranked.append(self.best(mixed, limit, at_least))
        within = (lambda name: True) if allowed is None else allowed.__contains__
        picks = deal(ranked, limit, self.producers, within, self.alike, lead)
        if 0 < lead < limit:
            picks = self._with_kin(picks, lead, limit, whole, within)
        return Chosen((text[:QUERY_CHARS], *cut) if len(cut) > 1 else (text[:QUERY_CHARS],), picks)

    def _with_kin(
        self,
        picks: tuple[Pick, ...],
        lead: int,
        limit: int,
        whole: Any,
        within: Callable[[str], bool],
    ) -> tuple[Pick, ...]:
        """``picks`` with, after the lead's, the other tools of each small source (at
        most ``KIN_TOOLS`` in play) that the lead holds ``KIN_PICKS`` of: a task's steps
        are often one service's (a file system's cd, ls, cat), best scoring first."""
        counts = Counter(self.sources[pick.name] for pick in picks[:lead])
        have = {pick.name for pick in picks}
        kin: list[str] = []
        for source, count in counts.items():
            members = self._members.get(source, ())
            if count < KIN_PICKS or len(members) > KIN_SCAN:
                continue
            in_play = [name for name in members if within(name)]
            if len(in_play) <= KIN_TOOLS:
                kin.extend(name for name in in_play if name not in have)
        if not kin:
            return picks
        where = self._where
        kin.sort(key=lambda name: -float(whole[where[name]]))
        added = tuple(Pick(name, 0, kin_of=self.sources[name]) for name in kin)
        return (*picks[:lead], *added, *picks[lead:])[:limit]

    def texts(self) -> dict[str, str]:
        """What each tool is embedded as: its name's words and its description."""
        return dict(self._texts)

    def attach(self, vectors: Any) -> None:
        """The tools' unit vectors (rows in the index's order), once an embeddings model
        gave them: from then on ``fused`` weighs meaning beside words."""
        if vectors is not None and len(vectors) != len(self.names):
            raise ValueError("one vector per tool")
        self._vectors = vectors

    @property
    def has_vectors(self) -> bool:
        return self._vectors is not None

    @property
    def width(self) -> int:
        """The width of the tools' vectors (0 before they are attached)."""
        return 0 if self._vectors is None else int(self._vectors.shape[1])


_SEARCH_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "description": "What the tools you need do, in a few words "
            "(an action, the thing it acts on, the service).",
        },
        "limit": {"type": "integer", "minimum": 1, "description": "How many tools, at most."},
    },
    "required": ["query"],
    "additionalProperties": False,
}


def describe_catalog(names: Collection[str], sources: dict[str, str]) -> str:
    """The search function's description: what the catalog holds."""
    counted = Counter(sources.get(name, "") for name in names)
    named = ", ".join(f"{source} ({n})" for source, n in counted.most_common(_SOURCES_NAMED))
    more = len(counted) - _SOURCES_NAMED
    if more > 0:
        named += f" and {more} more"
    return (
        f"Search the catalog of {len(names)} tools you may use (sources: {named}) for the "
        "ones that fit what you need to do. Only some of them are offered to you now; the "
        "tools a search finds can be called from your next step on. Search again with "
        "other words if none fits."
    )


class SearchTool(Tool):
    """``toolgate_search_tools``: a catalog's tools found for a model, among those its
    request may use (``allowed``), answered by the gateway itself (nothing leaves it).
    Its results are a pure function of its arguments: ``found`` gives them again."""

    __slots__ = ("_found", "allowed", "default", "index", "limit")

    def __init__(
        self, index: ToolIndex, allowed: frozenset[str], limit: int, default: int | None = None
    ) -> None:
        """``limit``: the most tools a search may ask for; ``default``: how many it
        gives unless it asks (``limit`` when unsaid)."""
        self.default = limit if default is None else max(1, min(default, limit))
        parameters = dict(_SEARCH_PARAMETERS)
        properties = dict(parameters["properties"])
        properties["limit"] = {
            **properties["limit"],
            "maximum": limit,
            "description": f"How many tools, at most (default {self.default}).",
        }
        parameters["properties"] = properties
        in_play = [name for name in index.names if name in allowed]
        super().__init__(
            SEARCH_TOOL,
            describe_catalog(in_play, index.sources),
            parameters,
            source="gateway",
            origin="the gateway's tool search",
        )
        self.index = index
        self.allowed = allowed
        self.limit = limit
        self._found: OrderedDict[str, Chosen] = OrderedDict()

    @property
    def effects(self) -> Effects:
        return "read"

    def chosen(self, query: str, limit: int | None = None) -> Chosen:
        """The tools that best fit ``query``, part by part (``ToolIndex.choose``)."""
        wanted = self.default if limit is None else max(1, min(limit, self.limit))
        key = f"{wanted}:{query[:QUERY_CHARS]}"
        found = self._found.get(key)
        if found is None:
            # The same cut as a preselection's: a tool that merely shares a word or two
            # with the query (a description stuffed with the catalog's) is filler.
            found = self.index.choose(query, wanted, self.allowed, FIT, whole_ranked=False)
            if len(self._found) >= _FOUND_KEPT:
                self._found.popitem(last=False)
            self._found[key] = found
        return found

    def search(self, query: str, limit: int | None = None) -> tuple[str, ...]:
        """The names of the tools that best fit ``query``, in the order chosen."""
        return self.chosen(query, limit).names

    def _read(self, arguments: str | None) -> dict[str, Any] | None:
        """A call's arguments as read, or None for arguments that are not a search's."""
        try:
            return self.prepare(arguments, _NO_CONTEXT).arguments
        except ToolArgumentsInvalid:
            return None

    def query(self, arguments: str | None) -> str | None:
        """The query of a call with these arguments, as it is read; None for arguments
        that are not a search's."""
        read = self._read(arguments)
        return None if read is None else str(read["query"])[:QUERY_CHARS]

    def picked(self, arguments: str | None) -> Chosen | None:
        """What a call with these arguments finds, part by part; None for arguments
        that are not a search's."""
        read = self._read(arguments)
        return None if read is None else self.chosen(read["query"], read.get("limit"))

    def found(self, arguments: str | None) -> tuple[str, ...]:
        """What a call with these arguments (as the model wrote them) finds; nothing for
        arguments that are not a search's."""
        picked = self.picked(arguments)
        return () if picked is None else picked.names

    def answer(self, query: str, limit: int | None = None) -> str:
        """What the model reads: the tools found, each with a line about it (and the
        tool it gives an argument to, for a producer brought along), grouped by the
        part of the query they serve when it has several."""
        chosen = self.chosen(query, limit)
        about = self.index.about
        if not chosen.picks:
            note = (
                "No tool you may use matches these words. Search again with other words "
                "(what to do, the thing it acts on, the service)."
            )
            return dumps_text({"tools": [], "note": note})
        note = "These tools are offered from your next step on: call them by name."
        groups = chosen.groups()
        if len(groups) == 1:
            tools = [self._line(pick, about) for pick in groups[0][1]]
            return dumps_text({"tools": tools, "note": note})
        parts = [
            {"part": part, "tools": [self._line(pick, about) for pick in picks]}
            for part, picks in groups
        ]
        return dumps_text({"parts": parts, "note": note})

    @staticmethod
    def _line(pick: Pick, about: dict[str, str]) -> dict[str, str]:
        line = {"name": pick.name, "description": about.get(pick.name, "")}
        if pick.produces_for is not None:
            line["gives_arguments_to"] = pick.produces_for
        return line

    async def run(self, call: PreparedCall, deadline: float | None, http: HttpRunner) -> ToolResult:
        query, limit = call.arguments["query"], call.arguments.get("limit")
        if len(self.allowed) > OFFLOADED_TOOLS:  # a large catalog's search, off the loop
            return ToolResult(await asyncio.to_thread(self.answer, query, limit), "ok")
        return ToolResult(self.answer(query, limit), "ok")


_NO_CONTEXT = CallContext("")
