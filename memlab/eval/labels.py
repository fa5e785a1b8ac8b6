"""A positive control for judges: real predictions, read and labelled right, partly right or wrong.

A judge checked only against the gold strings and the audit's wrong answers cannot be told from
a string matcher. This set holds what systems really answered, each read against its gold (the
audited gold where the LoCoMo audit corrects it) and labelled by the rule in the file itself, so
a judge's acceptance of right answers, of wrong ones and its agreement (Cohen's kappa) can be
measured. Half of the items are for choosing a judge and half for reporting it (``half``).

The file is one JSON object: ``rule`` (the labelling rule, lines of text), ``drawn`` (how the
items were drawn: runs, quotas, seed) and ``items``, each with ``id``, ``run``, ``question_id``,
``conversation_id``, ``category``, ``question``, ``gold``, ``audited_gold`` (None when the audit
keeps the gold), ``prediction``, ``half`` (``choose`` | ``report``), ``label`` (``right`` |
``partial`` | ``wrong``, None while unlabelled) and ``note`` (why, where it is not obvious).

A judge is measured on the items of LoCoMo categories 1-4 (``judge_labelled``, ``agreement``):
how many right answers it accepts (its recall), how many partly right and wrong ones, and
Cohen's kappa between its verdict and right-vs-wrong (partly right items left out), each share
with its Wilson interval and kappa with a seeded bootstrap interval, over all items and per half.
An adversarial item's gold is the answer its false premise invites, so a judge comparing with it
is not what decides it; memlab's abstention detector (``abstains``) is measured there instead.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memlab.errors import MemlabError
from memlab.eval.abstention import abstains
from memlab.eval.intervals import wilson_interval
from memlab.eval.judge import Judge, JudgeIn

LABELS = ("right", "partial", "wrong")
HALVES = ("choose", "report")
ITEM_FIELDS = ("id", "run", "question_id", "conversation_id", "category", "question", "gold", "audited_gold",
               "prediction", "half", "label", "note")


class LabelFileError(MemlabError, ValueError):
    """A label file that is not what this module writes."""


def _same_answer(prediction: object) -> str:
    return " ".join(str(prediction).lower().split())


def draw(runs: Mapping[str, Sequence[Mapping[str, Any]]], quotas: Mapping[str, int], seed: int,
         audited: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Items to label: per category, ``quotas[category]`` predictions taken in turn from each run
    that has one left (each run's rows shuffled by ``seed``), a question answered the same way
    by two runs taken once; within a category the items alternate ``choose`` / ``report``.
    ``audited`` maps a question id to the audit's corrected gold."""
    rng = random.Random(seed)
    pools = {}
    for run, rows in runs.items():
        rows = list(rows)
        rng.shuffle(rows)
        pools[run] = rows
    items: list[dict[str, Any]] = []
    taken: set[tuple[str, str]] = set()
    for category, quota in quotas.items():
        queues = {run: [r for r in rows if r["category"] == category] for run, rows in pools.items()}
        chosen: list[dict[str, Any]] = []
        while len(chosen) < quota and any(queues.values()):
            for run, queue in queues.items():
                while queue and len(chosen) < quota:
                    row = queue.pop(0)
                    key = (row["question_id"], _same_answer(row["prediction"]))
                    if key in taken:
                        continue
                    taken.add(key)
                    chosen.append({"run": run, **{k: row[k] for k in ("question_id", "conversation_id", "category",
                                                                       "question", "gold", "prediction")}})
                    break
        for position, item in enumerate(chosen):
            items.append({"id": f"{item['question_id']}@{item['run']}", **item,
                          "audited_gold": (audited or {}).get(item["question_id"]),
                          "half": HALVES[position % 2], "label": None, "note": ""})
    return [{field: item[field] for field in ITEM_FIELDS} for item in items]


def load_labels(path: str | Path) -> dict[str, Any]:
    """The label file at ``path``, checked (``LabelFileError`` naming the first problem)."""
    path = Path(path)
    try:
        tree = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise LabelFileError(f"{path}: cannot be read as JSON ({e})") from None
    if not isinstance(tree, dict) or not isinstance(tree.get("rule"), list) or not isinstance(tree.get("items"), list):
        raise LabelFileError(f"{path}: needs an object with a 'rule' list and an 'items' list")
    ids = set()
    for number, item in enumerate(tree["items"]):
        where = f"{path}, item {number}"
        if not isinstance(item, dict) or set(item) != set(ITEM_FIELDS):
            raise LabelFileError(f"{where}: needs exactly the fields {', '.join(ITEM_FIELDS)}")
        if item["id"] in ids:
            raise LabelFileError(f"{where}: id {item['id']!r} repeated")
        ids.add(item["id"])
        if item["label"] is not None and item["label"] not in LABELS:
            raise LabelFileError(f"{where}: label {item['label']!r} is none of {', '.join(LABELS)}")
        if item["half"] not in HALVES:
            raise LabelFileError(f"{where}: half {item['half']!r} is none of {', '.join(HALVES)}")
    return tree


def judged_items(tree: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The labelled items a judge is measured on: categories 1-4."""
    return [item for item in tree["items"] if item["label"] is not None and item["category"] != "adversarial"]


def judge_labelled(judge: Judge, items: Sequence[Mapping[str, Any]], batch_size: int = 8) -> dict[str, bool | None]:
    """``judge``'s verdict on each item (by id) against the gold it was labelled with (the audited
    gold where there is one); None where it gave no usable verdict."""
    inputs = [JudgeIn(item["question"], item["audited_gold"] or item["gold"], str(item["prediction"])) for item in items]
    outs = [out for start in range(0, len(inputs), batch_size) for out in judge(inputs[start:start + batch_size])]
    return {item["id"]: out.correct for item, out in zip(items, outs)}


def cohen_kappa(first: Sequence[bool], second: Sequence[bool]) -> float | None:
    """Cohen's kappa of two 0/1 raters; None where it is undefined (both raters constant alike)."""
    a, b = np.asarray(first, dtype=float), np.asarray(second, dtype=float)
    if len(a) == 0:
        return None
    observed = float(np.mean(a == b))
    expected = float(a.mean() * b.mean() + (1 - a.mean()) * (1 - b.mean()))
    return None if expected == 1.0 else (observed - expected) / (1 - expected)


def _share(accepted: int, n: int) -> dict[str, Any]:
    low, high = wilson_interval(accepted, n) if n else (None, None)
    return {"accepted": accepted, "n": n, "rate": accepted / n if n else None, "ci": [low, high] if n else None}


def agreement(items: Sequence[Mapping[str, Any]], verdicts: Mapping[str, bool | None], resamples: int = 2_000,
              seed: int = 0) -> dict[str, Any]:
    """How ``verdicts`` (True: accepted) agree with the labels of ``items`` (module docstring)."""
    judged = [(item, verdicts.get(item["id"])) for item in items]
    given = [(item, verdict) for item, verdict in judged if verdict is not None]
    result: dict[str, Any] = {"n": len(items), "no_verdict": len(judged) - len(given)}
    for label in LABELS:
        chosen = [verdict for item, verdict in given if item["label"] == label]
        result[f"accepts_{label}"] = _share(sum(chosen), len(chosen))
    decided = [(item["label"] == "right", verdict) for item, verdict in given if item["label"] != "partial"]
    kappa = cohen_kappa([label for label, _ in decided], [verdict for _, verdict in decided])
    interval = None
    if kappa is not None:
        rng = np.random.default_rng(seed)
        pairs = np.asarray(decided, dtype=float)
        draws = [cohen_kappa(*pairs[rng.integers(0, len(pairs), len(pairs))].T) for _ in range(resamples)]
        draws = [d for d in draws if d is not None]
        interval = [float(np.quantile(draws, 0.025)), float(np.quantile(draws, 0.975))] if draws else None
    result["kappa"] = {"value": kappa, "ci": interval, "n": len(decided)}
    return result


def judge_agreement(tree: Mapping[str, Any], verdicts: Mapping[str, bool | None]) -> dict[str, Any]:
    """``agreement`` over the judged items, and over each half of them."""
    items = judged_items(tree)
    return {"all": agreement(items, verdicts),
            **{half: agreement([i for i in items if i["half"] == half], verdicts) for half in HALVES}}


def abstention_agreement(tree: Mapping[str, Any]) -> dict[str, Any]:
    """memlab's abstention detector against the labels of the adversarial items: right there means
    the prediction declined the false premise."""
    items = [item for item in tree["items"] if item["label"] is not None and item["category"] == "adversarial"]
    return agreement(items, {item["id"]: abstains(item["prediction"]) for item in items})
