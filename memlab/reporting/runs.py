"""Finished run folders (``metrics.json`` + ``predictions.jsonl``, as ``memlab run`` writes them), loaded and checked."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memlab.errors import MemlabError


class ReportError(MemlabError, ValueError):
    """A run folder that cannot be reported, or runs that cannot be compared; the message names which and why."""


@dataclass(frozen=True)
class RunResult:
    """One finished run: its label (the folder name, made unique), ``metrics.json`` and its question rows."""

    name: str
    folder: Path
    metrics: dict[str, Any]
    rows: tuple[dict[str, Any], ...]

    @property
    def question_ids(self) -> tuple[str, ...]:
        return tuple(row["question_id"] for row in self.rows)

    def by_question(self) -> dict[str, dict[str, Any]]:
        return {row["question_id"]: row for row in self.rows}

    def overall(self, metric: str) -> float | None:
        return self.metrics.get("overall", {}).get(metric)

    @property
    def judge(self) -> str | None:
        """The judge that scored the run, as ``prompt (model)``; None when no judge ran. Two runs'
        judge columns measure the same thing only when this is the same."""
        info = self.metrics.get("judge_info")
        if not isinstance(info, dict):
            return None
        return f"{info.get('prompt_id', '?')} ({info.get('judge_model', '?')})"


def load_run(folder: str | os.PathLike, name: str | None = None) -> RunResult:
    """The run in ``folder``; ``ReportError`` naming the folder and the file when it is not a
    complete run (no ``metrics.json``, an interrupted ``predictions.jsonl.partial``, unparseable files)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ReportError(f"{folder}: not a folder (give the folders `memlab run --out` wrote)")
    metrics_path, rows_path = folder / "metrics.json", folder / "predictions.jsonl"
    if not metrics_path.is_file():
        hint = " (the run was interrupted: predictions.jsonl.partial is there)" \
            if (folder / "predictions.jsonl.partial").exists() else ""
        raise ReportError(f"{folder}: no metrics.json, so not a finished memlab run{hint}")
    try:
        metrics = json.loads(metrics_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ReportError(f"{metrics_path}: unreadable ({type(e).__name__}: {e})") from None
    if not isinstance(metrics, dict) or not isinstance(metrics.get("overall"), dict) \
            or not isinstance(metrics.get("by_category"), dict):
        raise ReportError(f"{metrics_path}: not a memlab metrics.json (no 'overall' and 'by_category' blocks)")
    if not rows_path.is_file():
        raise ReportError(f"{folder}: metrics.json without predictions.jsonl")
    try:
        lines = rows_path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ReportError(f"{rows_path}: unreadable ({type(e).__name__}: {e})") from None
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            raise ReportError(f"{rows_path}, line {number}: not JSON ({e})") from None
        problem = _row_problem(row)
        if problem:
            raise ReportError(f"{rows_path}, line {number}: {problem}")
        rows.append(row)
    if len(rows) != metrics.get("n_questions", len(rows)):
        raise ReportError(f"{folder}: predictions.jsonl holds {len(rows)} questions, metrics.json counts "
                          f"{metrics.get('n_questions')}")
    return RunResult(name or folder.name, folder, metrics, tuple(rows))


def _row_problem(row: Any) -> str | None:
    """Why ``row`` is not a question row of ``memlab run`` (None: it is): every row names its
    question and holds its prediction (null when the run stopped at retrieval or the question failed)."""
    if not isinstance(row, dict):
        return "not a JSON object"
    if not isinstance(row.get("question_id"), str):
        return "a row without a 'question_id' string"
    if "prediction" not in row or not (row["prediction"] is None or isinstance(row["prediction"], str)):
        return f"the row of {row['question_id']} has no 'prediction' (a string, or null)"
    return None


def load_runs(folders: Sequence[str | os.PathLike]) -> list[RunResult]:
    """The runs in ``folders``, labelled by folder name (with the parent's when two names clash),
    refused when they are not over the same questions: a table or a plot that averages different
    question sets compares nothing."""
    if not folders:
        raise ReportError("no run folders given")
    paths = [Path(f) for f in folders]
    if len({p.resolve() for p in paths}) != len(paths):
        raise ReportError("a run folder is given twice")
    names = [p.name for p in paths]
    names = [f"{p.parent.name}/{p.name}" if names.count(p.name) > 1 else p.name for p in paths]
    runs = [load_run(p, name) for p, name in zip(paths, names)]
    reference = runs[0]
    expected = set(reference.question_ids)
    for run in runs[1:]:
        got = set(run.question_ids)
        if got != expected:
            missing, extra = sorted(expected - got), sorted(got - expected)
            detail = "; ".join(part for part in (
                f"{len(missing)} of {reference.name}'s questions missing (e.g. {', '.join(missing[:3])})" if missing else "",
                f"{len(extra)} questions {reference.name} lacks (e.g. {', '.join(extra[:3])})" if extra else "",
            ) if part)
            raise ReportError(f"{run.name} ({run.folder}) is not over the same questions as {reference.name} "
                              f"({reference.folder}): {detail}. Report runs over one question set together")
        _refuse_different_questions(reference, run)
    return runs


#: What makes two rows with one question id the same question (``audited``: the audit's gold).
QUESTION_IDENTITY = ("conversation_id", "question", "category", "gold", "audited gold")


def _identity(row: dict[str, Any]) -> tuple[Any, ...]:
    audited = row.get("audited")
    return (row.get("conversation_id"), row.get("question"), row.get("category"), row.get("gold"),
            audited.get("gold") if isinstance(audited, dict) else None)


def _refuse_different_questions(reference: RunResult, run: RunResult) -> None:
    """Rows that share an id must be one question: the same conversation, text, category and gold
    (original and audited). Two versions of a data file, or one run with errata and one without,
    reuse ids for questions that differ; pairing them would compare nothing."""
    theirs = run.by_question()
    differing = []
    for row in reference.rows:
        mine, other = _identity(row), _identity(theirs[row["question_id"]])
        if mine != other:
            field = next(name for name, a, b in zip(QUESTION_IDENTITY, mine, other) if a != b)
            differing.append((row["question_id"], field))
    if differing:
        first, field = differing[0]
        raise ReportError(f"{run.name} ({run.folder}) and {reference.name} ({reference.folder}) share question ids "
                          f"but not questions: {len(differing)} of {len(reference.rows)} differ (e.g. {first}: its "
                          f"{field}). Report runs over one version of the data, with the same errata, together")
