"""Re-score a finished run: its recorded answers scored again, by the current scorers and a judge.

A run's answers do not depend on how they are scored, so when a scorer or the judge changes
(issue 85 chose a judge that accepts right answers a small model's CORRECT / WRONG prompt rejects,
and taught the date-aware temporal scorer that "first weekend of August 2023" is not the month)
the committed runs are scored again from their ``predictions.jsonl``, including runs made at
commits whose pipelines no longer replay. Only judge calls are paid, and those a cache already
holds replay.

``rescore_run`` recomputes every answered row's answer scores (``score_answer``: both F1s,
BLEU-1, abstention, date-aware temporal) and its ``judge``, and the same for its ``audited`` block
against the audited gold; recomputes metrics.json's answer blocks (``overall``, ``by_category``,
``audited``) from the rows; sets ``judge_info`` to the new judge's and keeps the one it replaced,
with its overall figure, under ``rescored_from``; and sets the judge node of the run's
``config.yaml``. Each file is written atomically, the rows first and metrics.json last: an
interrupted re-score is finished by running it again (its verdicts replay).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from memlab.config import dump_config
from memlab.errors import MemlabError
from memlab.eval import metrics as M
from memlab.eval.conversation import judge_verdict, score_answer
from memlab.eval.judge import Judge
from memlab.eval.report import METRICS, audited_blocks, is_locomo
from memlab.fileio import atomic_file, write_json_atomic
from memlab.types import ANSWERABLE_CATEGORIES, Question


class RescoreError(MemlabError, ValueError):
    """A folder that is not a finished run with answers to score."""


def _read_run(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    try:
        metrics = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
        rows = [json.loads(line) for line in (folder / "predictions.jsonl").read_text(encoding="utf-8").splitlines()
                if line.strip()]
    except (OSError, ValueError) as e:
        raise RescoreError(f"{folder}: not a finished run (needs metrics.json and predictions.jsonl): {e}") from None
    if metrics.get("retrieval_only"):
        raise RescoreError(f"{folder}: a retrieval-only run has no answers to score")
    return metrics, rows


def rescore_rows(rows: list[dict[str, Any]], judge: Judge) -> int:
    """Score each answered row again, in place (module docstring); returns how many answers got
    no usable verdict from ``judge``."""
    unjudged = 0
    for row in rows:
        if row.get("prediction") is None:
            continue
        question = Question(id=row["question_id"], conversation_id=row["conversation_id"], text=row["question"],
                            answer=row["gold"], category=row["category"])
        row.update(score_answer(row["prediction"], question))
        row["judge"] = judge_verdict(judge, row["category"], row["question"], row["gold"], row["prediction"])
        unjudged += row["judge"] is None
        audited = row.get("audited")
        if audited:  # the audit corrects this question: its gold is scored the same way
            audited.update(score_answer(row["prediction"], dataclasses.replace(question, answer=audited["gold"])))
            same = audited["gold"] == row["gold"]
            audited["judge"] = row["judge"] if same else \
                judge_verdict(judge, row["category"], row["question"], audited["gold"], row["prediction"])
    return unjudged


def rescore_run(folder: str | Path, judge: Judge, judge_node: Mapping[str, Any], config_path: str) -> dict[str, Any]:
    """Re-score the run in ``folder`` with ``judge`` (built from ``judge_node``, loaded from
    ``config_path``) and write it back (module docstring); returns the new metrics."""
    folder = Path(folder)
    metrics, rows = _read_run(folder)
    try:
        unjudged = rescore_rows(rows, judge)
    except KeyError as e:  # a row without the fields a run writes: nothing is written back
        raise RescoreError(f"{folder / 'predictions.jsonl'}: a row has no {e} field, so it is not a memlab run's "
                           "row") from None
    before = {"judge_info": metrics.get("judge_info"), "judge": (metrics.get("overall") or {}).get("judge")}
    metrics.update(M.aggregate(rows, METRICS, ANSWERABLE_CATEGORIES if is_locomo(rows) else None))
    if "audited" in metrics:
        metrics["audited"] = audited_blocks(rows)
    metrics["judge_info"] = judge.judge_info()
    # A run re-scored twice keeps the judge it was first made with, and that judge's overall figure.
    metrics["rescored_from"] = metrics.get("rescored_from") or before
    metrics["rescored_from"].update({"judge_config": config_path, "unjudged": unjudged})
    with atomic_file(folder / "predictions.jsonl") as tmp:
        tmp.write_text("".join(json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in rows),
                       encoding="utf-8")
    config_file = folder / "config.yaml"
    if config_file.is_file():
        config = yaml.safe_load(config_file.read_text(encoding="utf-8")) or {}
        config.setdefault("eval", {})["judge"] = dict(judge_node)
        with atomic_file(config_file) as tmp:
            tmp.write_text(dump_config(config), encoding="utf-8")
    write_json_atomic(folder / "metrics.json", metrics)
    return metrics
