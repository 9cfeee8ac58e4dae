"""Tool search for whole tasks (issue 50): does the first round hold every tool a
request needs, when it needs several?

The data is public: BFCL v4 (Apache-2.0, the ``bfcl-eval`` wheel ``bench.retrieval``
pins). Its multi-turn category gives agents' tasks over eight stateful services (a file
system, messaging, posting, tickets, trading, travel booking, vehicle control, maths),
whose 153 functions say what they answer (``response``, read as ``returns``). The
catalog pools them with the 1,287 single-turn functions ``bench.retrieval`` measures
(1,430 in all; a multi-turn function whose name a single-turn one has takes its
service's prefix). Three sets of requests:

- **turns**: each multi-turn turn whose ground truth calls two or more distinct
  functions, as its conversation's user messages so far (the last is the turn's), and
  the single-turn ``parallel_multiple`` requests that call two or more;
- **tasks**: each multi-turn conversation's user messages joined into one request (an
  agent given the whole task at once), needing every function its turns call (2 to 9
  distinct, 5.4 on average);
- **bfcl**: every single-turn request, as ``bench.retrieval`` has them.

The measure is the share of requests whose expected tools are all in the first round
(and the average share of them that are), by how many a request needs; and the bytes of
the first round's definitions as a share of the whole catalog's. Two rankings at the
default settings: by words (BM25) alone, and hybrid, with the vectors of a real
embedding model (all-MiniLM-L6-v2, ``bench.embedder``) as the gateway weighs them
(scores scaled and added); for comparison, hybrid by reciprocal rank fusion instead
(``rrf``), and the previous release's first round (the last user message's best 8 by
words, no parts, no producers). The choices were made looking at
requests with even numbers; odd ones are reported apart as held out.

Vectors are computed once and kept in ``bench/.data`` by the model and the text.

    python -m bench.tasks [--no-embeddings]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import types
import zipfile
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from gateway.config import ToolSearchConfig
from gateway.policy.tool_search import Catalog, Catalogs
from gateway.values import Message
from tool_registry import FIT, QUERY_CHARS, HttpTool, ToolIndex, ToolRegistry, ToolSpec, tool_name

from . import embedder, retrieval
from .pinned import DATA
from .retrieval import Case

_CONTEXT_MESSAGES = 6
BEFORE_PRESELECT = 8  # the previous release's default


def _lines(archive: zipfile.ZipFile, name: str) -> list[dict[str, Any]]:
    with archive.open(f"bfcl_eval/data/{name}") as file:
        return [json.loads(line) for line in file if line.strip()]


def load(path: Path) -> tuple[list[HttpTool], dict[str, list[Case]]]:
    """The pooled catalog and the three sets of requests."""
    single_tools, single = retrieval.load(path)
    taken = {tool.name for tool in single_tools}
    multi: dict[str, HttpTool] = {}  # by the name the ground truth calls
    with zipfile.ZipFile(path) as archive:
        for member in sorted(archive.namelist()):
            if not member.startswith("bfcl_eval/data/multi_turn_func_doc/"):
                continue
            service = member.rsplit("/", 1)[1].removesuffix(".json")
            for function in _lines(archive, member.removeprefix("bfcl_eval/data/")):
                called = function["name"]
                if called in multi:
                    continue
                name = tool_name("", called)
                if name in taken:
                    name = tool_name(service, called)
                spec = ToolSpec(
                    name=name,
                    description=function.get("description", ""),
                    parameters=retrieval._schema(function.get("parameters") or {"type": "dict"}),
                    returns=retrieval._schema(function.get("response")),
                    http={"url": "http://127.0.0.1:9/unused"},
                )
                multi[called] = HttpTool(spec, source="bfcl", label=f"bfcl:{service}")
        questions = _lines(archive, "BFCL_v4_multi_turn_base.json")
        answers = _lines(archive, "possible_answer/BFCL_v4_multi_turn_base.json")
    turns, tasks = [], []
    for number, (entry, answer) in enumerate(zip(questions, answers, strict=True)):
        history: list[Message] = []
        every: set[str] = set()
        asked, truths = entry["question"], answer["ground_truth"]
        for at, (turn, truth) in enumerate(zip(asked, truths, strict=True)):
            history += [Message("user", m["content"]) for m in turn if isinstance(m, dict)]
            expected = frozenset(multi[call.split("(")[0]].name for call in truth)
            every |= expected
            if len(expected) >= 2 and turn:
                turns.append(Case(f"{entry['id']}#{at}", number, tuple(history), expected))
        text = "\n".join(m.text for m in history)
        if len(every) >= 2:
            tasks.append(Case(entry["id"], number, (Message("user", text),), frozenset(every)))
    turns += [
        case
        for case in single
        if case.id.startswith(("parallel_multiple_", "live_parallel_multiple_"))
        and len(case.expected) >= 2
    ]
    return [*single_tools, *multi.values()], {"turns": turns, "tasks": tasks, "bfcl": single}


class Vectors:
    """The model's vectors of texts, kept on disk by model and text."""

    def __init__(self, data: Path) -> None:
        self._path = data / f"vectors-{embedder.MODEL_NAME}.npz"
        self._known: dict[str, Any] = {}
        if self._path.exists():
            with np.load(self._path) as kept:
                self._known = dict(zip(kept["keys"].tolist(), kept["rows"], strict=True))
        self._model: embedder.Embedder | None = None
        self._data = data

    @staticmethod
    def _key(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def of(self, texts: Iterable[str]) -> dict[str, Any]:
        wanted = list(dict.fromkeys(texts))
        missing = [t for t in wanted if self._key(t) not in self._known]
        if missing:
            if self._model is None:
                self._model = embedder.Embedder.load(self._data)
            rows = self._model.embed(missing)
            self._known.update((self._key(t), r) for t, r in zip(missing, rows, strict=True))
            keys = list(self._known)
            np.savez(self._path, keys=np.array(keys), rows=np.stack([self._known[k] for k in keys]))
        return {t: self._known[self._key(t)] for t in wanted}


def rank_fused(index: ToolIndex, words: Any, near: Any, allowed: Any) -> Any:
    """Reciprocal rank fusion (k = 60) of BM25's ranking and the vectors', in place of
    the gateway's sum of scaled scores, for comparison."""
    if near is None:
        return words
    if allowed is not None:
        near = np.where(index._mask(allowed) > 0, near, -np.inf)
    fused = 1.0 / (60.0 + _ranks(near))
    if words is not None:
        fused = fused + np.where(words > 0, 1.0 / (60.0 + _ranks(words)), 0.0)
    return np.where(np.isfinite(near), fused, 0.0)


def _ranks(scores: Any) -> Any:
    ranks = np.empty(len(scores), dtype=np.float64)
    ranks[np.argsort(-scores, kind="stable")] = np.arange(len(scores))
    return ranks


def before(catalog: Catalog, history: tuple[Message, ...]) -> tuple[str, ...]:
    """The previous release's first round: the last user message's best ``preselect``
    (8 by default then) by words, then the recent messages' words."""
    index, allowed, wanted = catalog.tool.index, catalog.tool.allowed, BEFORE_PRESELECT
    text = catalog.request_text(history)
    found = index.search(text, wanted, allowed, FIT) if text else []
    if len(found) < wanted:
        recent = " ".join(m.text[:QUERY_CHARS] for m in history[-_CONTEXT_MESSAGES:])
        found += [n for n in index.search(recent, wanted, allowed, FIT) if n not in found]
    return tuple(found[:wanted])


def scored(
    cases: list[Case], found: list[tuple[str, ...]], sizes: Mapping[str, int]
) -> dict[str, Any]:
    """All-in share, average share found and bytes, overall, by need and by half."""
    whole = sum(sizes.values())
    by_need: dict[str, list[bool]] = defaultdict(list)
    halves: dict[str, list[bool]] = defaultdict(list)
    share, spent = [], []
    for case, names in zip(cases, found, strict=True):
        got = set(names)
        complete = case.expected <= got
        by_need[str(min(len(case.expected), 5))].append(complete)
        halves["held_out" if case.number % 2 else "looked_at"].append(complete)
        share.append(len(case.expected & got) / len(case.expected))
        spent.append(sum(sizes.get(n, 0) for n in names) / whole)
    return {
        "requests": len(cases),
        "all": round(
            sum(c.expected <= set(f) for c, f in zip(cases, found, strict=True)) / len(cases), 3
        ),
        **{half: round(sum(v) / len(v), 3) for half, v in sorted(halves.items())},
        "share": round(statistics.fmean(share), 3),
        "by_need": {n: round(sum(v) / len(v), 2) for n, v in sorted(by_need.items())},
        "bytes_share": round(statistics.fmean(spent), 4),
        "tools_offered": round(statistics.fmean(len(f) for f in found), 1),
    }


def measure(data: Path = DATA, embeddings: bool = True) -> dict[str, Any]:
    """The shares, for ``make bench`` and the command line."""
    tools, sets = load(retrieval.wheel(data))
    registry = ToolRegistry(tools)
    catalogs = Catalogs.build(registry)
    settings = ToolSearchConfig(mode="on")
    catalog = catalogs.of(registry.names, settings, frozenset())
    assert catalog is not None
    index = catalog.tool.index
    rankings: dict[str, Callable[[Case], tuple[str, ...]]] = {
        "before": lambda case: before(catalog, case.history),
        "words": lambda case: catalog.preselected(case.history).names,
    }
    vectors = Vectors(data) if embeddings else None
    if vectors is not None:
        texts = index.texts()
        found = vectors.of(texts.values())
        index.attach(np.stack([found[texts[name]] for name in index.names]))
        asked = [
            t for cases in sets.values() for c in cases for t in catalog.texts_to_embed(c.history)
        ]
        meanings = vectors.of(asked)
        rankings["hybrid"] = lambda case: catalog.preselected(case.history, meanings).names

        def by_ranks(case: Case) -> tuple[str, ...]:
            index._fused = types.MethodType(rank_fused, index)  # type: ignore[method-assign]
            try:
                return catalog.preselected(case.history, meanings).names
            finally:
                del index._fused

        rankings["rrf"] = by_ranks
    out: dict[str, Any] = {
        "dataset": retrieval.PACKAGE,
        "functions": len(tools),
        "settings": {"preselect": settings.preselect, "per_part": settings.per_part},
        "embedder": embedder.MODEL_NAME if embeddings else None,
    }
    for ranking, choose in rankings.items():
        out[ranking] = {
            label: scored(cases, [choose(case) for case in cases], index.sizes)
            for label, cases in sets.items()
        }
    return out


def lines(found: dict[str, Any]) -> list[str]:
    """The figures as text."""
    out = [
        f"Whole tasks on BFCL v4 multi-turn ({found['dataset']}): {found['functions']} "
        f"functions in one catalog, preselect {found['settings']['preselect']} and "
        f"{found['settings']['per_part']} more per further part; all of a request's tools "
        "in the first round (looked at / held out), their average share, by tools needed, "
        "the first round's bytes as a share of the catalog's"
    ]
    for ranking in ("before", "words", "hybrid", "rrf"):
        if ranking not in found:
            continue
        for label, r in found[ranking].items():
            needs = " ".join(f"{n}:{v}" for n, v in r["by_need"].items())
            out.append(
                f"  {ranking:6} {label:5} ({r['requests']}): all {r['all']} "
                f"({r['looked_at']} / {r['held_out']}), share {r['share']}, by need {needs}, "
                f"{r['tools_offered']} tools, {r['bytes_share']:.2%} of the bytes"
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-embeddings", action="store_true")
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args()
    print("\n".join(lines(measure(args.data, not args.no_embeddings))))


if __name__ == "__main__":
    main()
