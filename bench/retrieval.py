"""Tool search's retrieval quality (issue 36) on a public function-calling dataset.

The dataset is the Berkeley Function Calling Leaderboard (BFCL v4, Apache-2.0), as
the ``bfcl-eval`` package on PyPI ships it (version and SHA-256 pinned below; fetched
once with pip into ``bench/.data``). Its single-turn categories — simple (Python),
multiple, parallel, parallel-multiple, and their ``live`` (user-contributed)
counterparts — are pooled into one catalog of every distinct function (1,287; the
first definition of a name is kept), and every entry is a request: its user messages
are the conversation, the functions its ground truth calls are the expected tools.

The measure is the share of requests whose expected tools are all among the first
round's offered tools at ``preselect`` (8): the gateway's own preselection
(``Catalog.preselected``, exactly as a request runs it) beside plain BM25 (bm25s's
defaults over each function's name and description, queried with the last user
message). Nothing is trained; the ranking's choices were made looking at entries with
even numbers, so the odd ones are reported apart as held out.

    python -m bench.retrieval [--preselect 8] [--data PATH]
"""

from __future__ import annotations

import argparse
import json
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bm25s

from gateway.config import ToolSearchConfig
from gateway.policy.tool_search import Catalogs
from gateway.values import Message
from tool_registry import HttpTool, ToolRegistry, ToolSpec, tool_name

from .pinned import DATA, fetched

PACKAGE = "bfcl-eval==2026.3.23"
WHEEL = "bfcl_eval-2026.3.23-py3-none-any.whl"
SHA256 = "3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a"
CATEGORIES = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
)
_TYPES = {"dict": "object", "float": "number", "tuple": "array", "list": "array"}


@dataclass(frozen=True)
class Case:
    id: str
    number: int  # its place in its category: even ones were looked at, odd ones held out
    history: tuple[Message, ...]
    expected: frozenset[str]


def wheel(data: Path) -> Path:
    """The pinned wheel."""
    return fetched(PACKAGE, WHEEL, SHA256, data)


def _schema(value: Any) -> Any:
    """A BFCL parameter schema as JSON Schema (its ``dict``, ``float``, ``tuple``)."""
    if isinstance(value, dict):
        fixed = {key: _schema(inner) for key, inner in value.items()}
        kind = fixed.get("type")
        if isinstance(kind, str):
            if kind == "any":
                del fixed["type"]
            else:
                fixed["type"] = _TYPES.get(kind, kind)
        return fixed
    if isinstance(value, list):
        return [_schema(inner) for inner in value]
    return value


def _lines(archive: zipfile.ZipFile, name: str) -> Iterator[dict[str, Any]]:
    with archive.open(f"bfcl_eval/data/{name}") as file:
        for line in file:
            if line.strip():
                yield json.loads(line)


def load(path: Path) -> tuple[list[HttpTool], list[Case]]:
    """The pooled catalog and the requests."""
    tools: dict[str, HttpTool] = {}
    cases: list[Case] = []
    with zipfile.ZipFile(path) as archive:
        for category in CATEGORIES:
            answers = {
                a["id"]: a["ground_truth"]
                for a in _lines(archive, f"possible_answer/BFCL_v4_{category}.json")
            }
            for number, entry in enumerate(_lines(archive, f"BFCL_v4_{category}.json")):
                for function in entry["function"]:
                    name = tool_name("", function["name"])
                    if name not in tools:
                        spec = ToolSpec(
                            name=name,
                            description=function.get("description", ""),
                            parameters=_schema(function.get("parameters") or {"type": "dict"}),
                            http={"url": "http://127.0.0.1:9/unused"},
                        )
                        tools[name] = HttpTool(spec, source="bfcl")
                expected = frozenset(
                    tool_name("", called) for call in answers[entry["id"]] for called in call
                )
                turn = entry["question"][0]
                history = tuple(
                    Message("user" if m["role"] == "user" else "system", m["content"])
                    for m in turn
                    if isinstance(m.get("content"), str)
                )
                cases.append(Case(entry["id"], number, history, expected))
    return list(tools.values()), cases


def plain_bm25(tools: list[HttpTool], cases: list[Case], k: int) -> list[set[str]]:
    """bm25s with its defaults over name and description, the last user message asked."""
    corpus = [f"{tool.name} {tool.description}" for tool in tools]
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(corpus, show_progress=False), show_progress=False)
    found = []
    for case in cases:
        users = [m.text for m in case.history if m.role == "user"]
        tokens = bm25s.tokenize([users[-1]], show_progress=False)
        try:
            results, _ = retriever.retrieve(tokens, k=k, show_progress=False)
            found.append({tools[i].name for i in results[0]})
        except ValueError:  # a query none of whose words is in the corpus
            found.append(set())
    return found


def gateway(tools: list[HttpTool], cases: list[Case], k: int) -> list[set[str]]:
    """The gateway's own first round: ``Catalog.preselected``, as a request runs it."""
    registry = ToolRegistry(tools)
    catalogs = Catalogs.build(registry)
    settings = ToolSearchConfig(mode="on", preselect=k, per_part=0, max_loaded=max(k, 32))
    catalog = catalogs.of(registry.names, settings, frozenset())
    assert catalog is not None
    return [set(catalog.preselected(case.history).names) for case in cases]


def share(cases: list[Case], found: list[set[str]], keep: Any = None) -> tuple[float, int]:
    """The share of (kept) cases whose expected tools were all found, and how many."""
    picked = [(c, f) for c, f in zip(cases, found, strict=True) if keep is None or keep(c)]
    hits = sum(1 for case, got in picked if case.expected <= got)
    return hits / len(picked), len(picked)


def measure(preselect: int = 8, data: Path = DATA) -> dict[str, Any]:
    """The shares, for ``make bench`` and the command line."""
    tools, cases = load(wheel(data))
    halves = {
        "all": None,
        "looked_at": lambda c: c.number % 2 == 0,
        "held_out": lambda c: c.number % 2 == 1,
    }
    rows = {
        "gateway": gateway(tools, cases, preselect),
        "plain_bm25": plain_bm25(tools, cases, preselect),
    }
    return {
        "dataset": PACKAGE,
        "functions": len(tools),
        "requests": len(cases),
        "preselect": preselect,
        **{
            ranking: {half: round(share(cases, found, keep)[0], 3) for half, keep in halves.items()}
            for ranking, found in rows.items()
        },
    }


def lines(found: dict[str, Any]) -> list[str]:
    """The shares as text."""
    out = [
        f"BFCL v4 ({found['dataset']}): {found['functions']} distinct functions in one "
        f"catalog, {found['requests']} requests, preselect {found['preselect']}: the share "
        "whose expected tools are all in the first round (all / looked at / held out)"
    ]
    for ranking, label in (("gateway", "gateway"), ("plain_bm25", "plain BM25")):
        r = found[ranking]
        out.append(f"  {label}: {r['all']} / {r['looked_at']} / {r['held_out']}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preselect", type=int, default=8)
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args()
    print("\n".join(lines(measure(args.preselect, args.data))))


if __name__ == "__main__":
    main()
