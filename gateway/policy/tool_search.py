"""Tool search (docs/design.md §17): which of a request's server tools are offered when
there are too many to offer them all.

``Catalogs`` belongs to a runtime snapshot: its index (built off the event loop with
the snapshot) and, per distinct set of tools in play and settings, one ``Catalog``.
A ``Catalog`` is a request's: the search function the gateway answers for it (only
tools it may use are ever found), the tools always offered, and the first round's
best matches for its conversation (``preselected``).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Any

from gateway.config import ToolSearchConfig
from gateway.values import Message, ToolChoice, ToolDefinition
from tool_registry import (
    FIT,
    OFFLOADED_TOOLS,
    QUERY_CHARS,
    SEARCH_TOOL,
    Chosen,
    Pick,
    SearchTool,
    ToolIndex,
    ToolRegistry,
    definition_bytes,
    immutable,
)

_CATALOGS_KEPT = 256  # distinct (tools in play, settings) remembered per snapshot
_HASHED_TOOLS = 256  # tool sets up to this size are kept by value, larger by identity
_CONTEXT_MESSAGES = 6  # the recent messages whose text fills a short preselection


@immutable(eq=False)
class Catalog:
    """A request's server tools when they are searched."""

    tool: SearchTool  # toolgate_search_tools, answered for the tools in play
    in_play: tuple[str, ...]  # in registry order: what is offered keeps that order
    always: tuple[str, ...]  # offered in every round
    preselect: int
    max_loaded: int
    per_part: int
    # Where each tool in play comes in the registry's order.
    place: dict[str, int] = field(repr=False)
    # The search function's definition, one tuple for every round that offers it.
    definitions: tuple[ToolDefinition, ...] = field(repr=False)
    members: frozenset[str] = field(repr=False)  # the tools in play and the search function
    sizes: dict[str, int] = field(repr=False)  # each tool's definition's bytes
    total_bytes: int = 0  # of every tool in play's definitions
    search_bytes: int = 0  # of the search function's

    @property
    def heavy(self) -> bool:
        """Whether choosing among its tools is work for a thread, not the event loop
        (about a millisecond past ``OFFLOADED_TOOLS``; several with vectors)."""
        return len(self.in_play) > OFFLOADED_TOOLS

    def bytes_saved(self, offered: Sequence[str]) -> int:
        """The bytes of definitions a round offering ``offered`` (and the search
        function) does not send, beside one offering every tool in play."""
        sizes = self.sizes
        sent = sum(sizes.get(name, 0) for name in offered) + self.search_bytes
        return self.total_bytes - sent

    def request_text(self, history: Sequence[Message]) -> str:
        """What a first round's tools are chosen for: the last user message's text."""
        users = [m for m in history if m.role == "user"]
        return users[-1].text[:QUERY_CHARS] if users else ""

    def texts_to_embed(self, history: Sequence[Message]) -> tuple[str, ...]:
        """The texts whose vectors a preselection weighs: the request and its parts."""
        text = self.request_text(history)
        if not text:
            return ()
        cut = self.tool.index.parts(text)
        return (text, *cut) if len(cut) > 1 else (text,)

    def preselected(
        self, history: Sequence[Message], meanings: Mapping[str, Any] | None = None
    ) -> Chosen:
        """The tools that best fit the conversation: its last user message's best
        (``preselect``), then its parts' (``per_part`` more for each part past the
        first), each with its producers, at most ``max_loaded``; then its recent
        messages' words where that found too few. ``meanings``: the texts' vectors,
        where an embeddings model gave them (``texts_to_embed``)."""
        if self.preselect < 1:
            return Chosen((), ())
        index, allowed = self.tool.index, self.tool.allowed
        text = self.request_text(history)
        cut = index.parts(text)
        wanted = min(self.max_loaded, self.preselect + self.per_part * max(0, len(cut) - 1))
        chosen = index.choose(text, wanted, allowed, FIT, meanings, cut, lead=self.preselect)
        if len(chosen.picks) < wanted:
            recent = " ".join(m.text[:QUERY_CHARS] for m in history[-_CONTEXT_MESSAGES:])
            have = set(chosen.names)
            more = [n for n in index.search(recent, wanted, allowed, FIT) if n not in have]
            if more:
                parts = (*chosen.parts, "the recent conversation")
                extra = tuple(Pick(name, len(parts) - 1) for name in more)
                chosen = Chosen(parts, chosen.picks + extra[: wanted - len(chosen.picks)])
        return chosen

    def pinned(self, choice: ToolChoice | None) -> tuple[str, ...]:
        """The tools in play a client's ``tool_choice`` names: offered in every round."""
        if choice is None:
            return ()
        named = (choice.name,) if choice.name is not None else choice.allowed or ()
        return tuple(name for name in named if name in self.place)


class Catalogs:
    """A snapshot's tool search: its index and the catalogs of its requests."""

    def __init__(self, registry: ToolRegistry, index: ToolIndex) -> None:
        self._registry = registry
        self.index = index
        # By the tools (a few: by value; thousands: by the tuple's identity, a tenant's
        # own request after request, not hashed per request) and the settings.
        self._kept: dict[tuple[object, ToolSearchConfig], tuple[tuple[str, ...], Catalog]] = {}

    @classmethod
    def build(cls, registry: ToolRegistry) -> Catalogs:
        """Index ``registry``'s tools (blocking: build it off the event loop)."""
        return cls(registry, ToolIndex(registry))

    def of(
        self, tools: tuple[str, ...], settings: ToolSearchConfig, client_tools: frozenset[str]
    ) -> Catalog | None:
        """The catalog of a request with ``tools`` in play, or None when they are
        offered whole: search is off, or automatic and they are few, or the client has
        a tool of the search function's name."""
        if settings.mode == "off" or not tools or SEARCH_TOOL in client_tools:
            return None
        if settings.mode == "auto" and len(tools) <= settings.auto_above:
            return None
        key = (tools if len(tools) <= _HASHED_TOOLS else id(tools), settings)
        kept = self._kept.get(key)
        if kept is not None and (kept[0] is tools or len(tools) <= _HASHED_TOOLS):
            return kept[1]
        if len(self._kept) >= _CATALOGS_KEPT:
            self._kept.clear()
        catalog = self._catalog(tools, settings)
        self._kept[key] = (tools, catalog)
        return catalog

    def _catalog(self, tools: tuple[str, ...], settings: ToolSearchConfig) -> Catalog:
        registry = self._registry
        tool = SearchTool(self.index, frozenset(tools), settings.max_loaded, settings.search_limit)
        always = tuple(
            name
            for name in tools
            if (found := registry.get(name)) is not None
            and any(
                fnmatch.fnmatchcase(name, glob) or fnmatch.fnmatchcase(found.label, glob)
                for glob in settings.always
            )
        )
        sizes = self.index.sizes
        return Catalog(
            tool,
            tools,
            always,
            settings.preselect,
            settings.max_loaded,
            settings.per_part,
            {name: place for place, name in enumerate(tools)},
            (tool.definition,),
            frozenset((*tools, tool.name)),
            sizes,
            sum(sizes.get(name, 0) for name in tools),
            definition_bytes(tool.definition),
        )
