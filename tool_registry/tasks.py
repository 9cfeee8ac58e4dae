"""A request's parts, and the tools chosen to cover them (docs/tools.md, "Tool search").

A request often asks for several things ("the weather in Paris, then flights there, then
a hotel"). Ranked as one query, the part with the most matching words takes every slot.
So a request is cut into its parts (sentences; clauses after ``;``, "then", "and",
"also", "after that"…), each part ranked on its own, and the slots dealt round by round:
each part's best, then each part's second best…, a tool that is nearly another already
chosen put last (diversity, as maximal marginal relevance does), and each chosen tool's
producers (``producers.py``) brought along right after it.

Parts are read from hostile text: at most ``PARTS`` of them (clauses beyond are joined
to their neighbours), each of at most the query bound of words.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Mapping, Sequence

from .value_type import immutable

PARTS = 8  # the most parts a request is cut into
_CLAUSE = re.compile(
    r"[.!?]+(?=\s|$)|[;:\n\r]+|,|\b(?:then|and|also|after that|afterwards|next|finally|"
    r"lastly|additionally|plus|followed by|as well as|once done|once that is done)\b",
    re.IGNORECASE,
)
PRODUCED = -1  # a tool's part when it was brought along as another's producer
ALIKE_CHECKED = 8  # of a part's picks, those a new pick is compared with


@immutable
class Pick:
    """A chosen tool: the part it answers, or the tool whose argument it produces."""

    name: str
    part: int  # into ``Chosen.parts``
    produces_for: str | None = None
    kin_of: str | None = None  # the source it came with (``ToolIndex.choose``)


@immutable
class Chosen:
    """The tools chosen for a request's parts, in the order they were chosen."""

    parts: tuple[str, ...]
    picks: tuple[Pick, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(pick.name for pick in self.picks)

    def part_of(self, pick: Pick, by_name: Mapping[str, Pick] | None = None) -> str:
        """The part a pick answers: its own, or its consumer's for a producer."""
        by_name = {p.name: p for p in self.picks} if by_name is None else by_name
        seen: set[str] = set()
        while pick.produces_for is not None and pick.produces_for not in seen:
            seen.add(pick.produces_for)
            consumer = by_name.get(pick.produces_for)
            if consumer is None:
                break
            pick = consumer
        return self.parts[pick.part] if 0 <= pick.part < len(self.parts) else ""

    def groups(self) -> list[tuple[str, list[Pick]]]:
        """The picks by the part they answer, parts in order of their first pick."""
        grouped: dict[str, list[Pick]] = {}
        by_name = {pick.name: pick for pick in self.picks}
        for pick in self.picks:
            grouped.setdefault(self.part_of(pick, by_name), []).append(pick)
        return list(grouped.items())


def parts(text: str, has_words: Callable[[str], bool]) -> tuple[str, ...]:
    """The parts of ``text`` that hold a searchable word (``has_words``), in order, at
    most ``PARTS``; the whole text when it has only one (or is one clause)."""
    clauses = [c.strip(" ,") for c in _CLAUSE.split(text)]
    clauses = [c for c in clauses if c]
    if len(clauses) <= 1:  # one part: the text, whatever its words
        return (text.strip(),) if clauses else ()
    found = [c for c in clauses if has_words(c)]
    if len(found) <= 1:
        return (text.strip(),) if found else ()
    if len(found) > PARTS:  # joined into PARTS runs of neighbours
        size = -(-len(found) // PARTS)
        found = [" ".join(found[at : at + size]) for at in range(0, len(found), size)]
    return tuple(found)


def deal(
    ranked: Sequence[Sequence[str]],
    limit: int,
    producers: Mapping[str, tuple[str, ...]],
    allowed: Callable[[str], bool],
    alike: Callable[[str, str], bool],
    lead: int = 0,
) -> tuple[Pick, ...]:
    """``limit`` tools from the rankings (``ranked``, best first): the first
    ranking's ``lead`` best, then round by round each ranking's best not yet chosen, a
    tool ``alike`` one chosen for its ranking left to the end, and each pick's
    producers right after it."""
    chosen: dict[str, Pick] = {}
    queues = [deque(names) for names in ranked]
    deferred: list[Pick] = []
    mine: list[list[str]] = [[] for _ in ranked]  # each ranking's picks, for ``alike``

    def take(pick: Pick) -> None:
        chosen[pick.name] = pick
        if 0 <= pick.part < len(mine):
            mine[pick.part].append(pick.name)
        for producer in producers.get(pick.name, ()):
            if len(chosen) >= limit:
                return
            if producer not in chosen and allowed(producer):
                chosen[producer] = Pick(producer, PRODUCED, pick.name)

    if queues and lead > 0:  # the first ranking's best; the rest are the parts'
        led = [queues[0].popleft() for _ in range(min(lead, len(queues[0])))]
        if len(queues) > 1:
            queues[0].clear()
        for name in led:
            if len(chosen) >= limit:
                break
            if name not in chosen:
                take(Pick(name, 0))
    while len(chosen) < limit and any(queues):
        for part, queue in enumerate(queues):
            while queue and queue[0] in chosen:
                queue.popleft()
            if not queue or len(chosen) >= limit:
                continue
            name = queue.popleft()
            if any(alike(name, other) for other in mine[part][:ALIKE_CHECKED]):
                deferred.append(Pick(name, part))
                continue
            take(Pick(name, part))
    for pick in deferred:
        if len(chosen) >= limit:
            break
        if pick.name not in chosen:
            take(pick)
    return tuple(_answering(pick, ranked) for pick in chosen.values())


def _answering(pick: Pick, ranked: Sequence[Sequence[str]]) -> Pick:
    """A pick of the first ranking (the whole request's), said to answer the part
    that ranks it best, where one ranks it at all."""
    if pick.part != 0 or len(ranked) < 2 or pick.produces_for is not None:
        return pick
    best: tuple[int, int] | None = None
    for part, names in enumerate(ranked[1:], start=1):
        if pick.name in names:
            place = list(names).index(pick.name)
            if best is None or place < best[0]:
                best = (place, part)
    return pick if best is None else Pick(pick.name, best[1])
