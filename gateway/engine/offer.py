"""The server tools a searched run offers, round by round (docs/design.md §17).

An ``Offer`` is a value: the tools always offered (the catalog's, and any the
client's ``tool_choice`` names), the first round's best matches for the conversation,
and the tools the run has found or used since, newest last. Each round offers at most
``max_loaded`` of them — always, then the newest found or used, then the preselected —
in the registry's order (a stable prefix for an upstream's prompt cache), and the
search function. A turn's calls make the next offer (``after``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field
from typing import Any

from gateway.policy.ledger import Search
from gateway.policy.tool_search import Catalog
from gateway.values import Message, ToolCall, ToolChoice
from tool_registry import Chosen, immutable


@immutable
class Offer:
    catalog: Catalog
    pinned: tuple[str, ...]  # always offered: the catalog's, and the client's choice
    preselected: tuple[str, ...]
    loaded: tuple[str, ...] = ()  # found or used, newest last, at most ``max_loaded``
    # Why each preselected tool was chosen: the part of the request it answers.
    chosen: Chosen | None = field(default=None, compare=False)

    @classmethod
    def start(
        cls,
        catalog: Catalog,
        history: Sequence[Message],
        choice: ToolChoice | None,
        meanings: Mapping[str, Any] | None = None,
    ) -> Offer:
        """A run's first offer: the history's searches and calls (a turn put back after a
        hand-back keeps what it had found) count as found. ``meanings``: the vectors
        of the request's texts, where an embeddings model gave them."""
        pinned = tuple(dict.fromkeys((*catalog.always, *catalog.pinned(choice))))
        chosen = catalog.preselected(history, meanings)
        offer = cls(catalog, pinned, chosen.names, chosen=chosen)
        calls = [call for message in history for call in message.calls]
        return offer.after(calls) if calls else offer

    def after(self, calls: Iterable[ToolCall]) -> Offer:
        """The offer once ``calls`` were made: what their searches found, and the
        tools they called, are loaded (the newest kept)."""
        catalog = self.catalog
        search, place = catalog.tool, catalog.place
        loaded = dict.fromkeys(self.loaded)
        for call in calls:
            if call.name == search.name:
                new = search.found(call.arguments)
            elif call.name in place:
                new = (call.name,)
            else:
                continue
            for name in reversed(new):  # the best match ends newest
                loaded.pop(name, None)
                loaded[name] = None
        kept = tuple(loaded)[-catalog.max_loaded :]
        if kept == self.loaded:
            return self
        return Offer(catalog, self.pinned, self.preselected, kept, self.chosen)

    def searched_heavily(self, calls: Sequence[ToolCall]) -> bool:
        """Whether ``calls`` search a catalog large enough to search off the loop."""
        name = self.catalog.tool.name
        return self.catalog.heavy and any(call.name == name for call in calls)

    def found(self, calls: Iterable[ToolCall]) -> None:
        """What the searches among ``calls`` find, worked out now (kept by the search
        function: ``after`` and ``searches`` then read it)."""
        search = self.catalog.tool
        for call in calls:
            if call.name == search.name:
                search.picked(call.arguments)

    def searches(self, calls: Iterable[ToolCall]) -> tuple[Search, ...]:
        """The searches among ``calls``, with what each finds."""
        search = self.catalog.tool
        return tuple(
            Search(query, search.found(call.arguments), _grouped(search.picked(call.arguments)))
            for call in calls
            if call.name == search.name and (query := search.query(call.arguments)) is not None
        )

    def preselection(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """The preselected tools by the part of the request each answers."""
        return _grouped(self.chosen, every=True)

    @property
    def names(self) -> tuple[str, ...]:
        """The server tools this round offers, in the registry's order."""
        room = self.catalog.max_loaded
        chosen = dict.fromkeys(self.pinned[:room])
        for name in (*reversed(self.loaded), *self.preselected):
            if len(chosen) >= room:
                break
            chosen[name] = None
        place = self.catalog.place
        return tuple(sorted(chosen, key=place.__getitem__))


def _grouped(chosen: Chosen | None, every: bool = False) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``chosen``'s names by part: when it has several parts, or ``every`` time."""
    if chosen is None or not chosen.picks:
        return ()
    groups = chosen.groups()
    if len(groups) < 2 and not every:
        return ()
    return tuple((part, tuple(pick.name for pick in picks)) for part, picks in groups)
