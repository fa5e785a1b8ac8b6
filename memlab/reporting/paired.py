"""Two runs over the same questions, compared question by question: the paired difference of a
metric with a bootstrap confidence interval and a sign test, and the questions whose score changed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import binomtest

from memlab.eval.intervals import bootstrap_interval, detectable_difference
from memlab.reporting.runs import RunResult
from memlab.types import ANSWERABLE_CATEGORIES


@dataclass(frozen=True)
class PairedDifference:
    """``b - a`` over the questions both runs scored: mean with its percentile-bootstrap interval,
    and the sign test's two-sided p over the questions where they differ."""

    metric: str
    n: int
    mean_a: float
    mean_b: float
    difference: float
    ci_low: float
    ci_high: float
    wins: int
    losses: int
    ties: int
    sign_test_p: float


def scored_questions(run: RunResult) -> list[str]:
    """The questions a run's ``overall`` averages (LoCoMo: categories 1-4, adversarial left out)."""
    locomo = run.metrics.get("overall_over") == "LoCoMo categories 1-4"
    return [row["question_id"] for row in run.rows if not locomo or row["category"] in ANSWERABLE_CATEGORIES]


def paired_difference(a: RunResult, b: RunResult, metric: str, resamples: int = 10_000,
                      confidence: float = 0.95, seed: int = 0) -> PairedDifference | None:
    """``metric`` of ``b`` minus ``a`` over the questions both scored (None when there are none,
    e.g. a retrieval-only run has no F1). The bootstrap resamples questions (seeded, so a report
    is reproducible)."""
    values = _pairs(a, b, metric, None)
    if values is None:
        return None
    differences = values[:, 1] - values[:, 0]
    ci_low, ci_high = bootstrap_interval(differences, resamples, confidence, seed)
    wins, losses = int((differences > 0).sum()), int((differences < 0).sum())
    return PairedDifference(
        metric=metric, n=len(differences), mean_a=float(values[:, 0].mean()), mean_b=float(values[:, 1].mean()),
        difference=float(differences.mean()),
        ci_low=ci_low, ci_high=ci_high,
        wins=wins, losses=losses, ties=len(differences) - wins - losses,
        sign_test_p=float(binomtest(wins, wins + losses, 0.5).pvalue) if wins + losses else 1.0,
    )


def _pairs(a: RunResult, b: RunResult, metric: str, category: str | None) -> np.ndarray | None:
    """``(a's, b's)`` value of ``metric`` per question both scored, of ``category`` (None: the
    questions ``overall`` averages); None when there is none."""
    rows_a, rows_b = a.by_question(), b.by_question()
    questions = scored_questions(a) if category is None else \
        [row["question_id"] for row in a.rows if row["category"] == category]
    pairs = [(rows_a[q].get(metric), rows_b[q].get(metric)) for q in questions if q in rows_b]
    pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
    return np.array(pairs, dtype=float) if pairs else None


def detectable_by_category(a: RunResult, b: RunResult, metric: str) -> dict[str, tuple[int, float | None]]:
    """Per category of ``a``: the questions both runs scored on ``metric`` and the smallest mean
    difference that many could detect (``memlab.eval.intervals.detectable_difference``)."""
    found = {}
    for category in dict.fromkeys(row["category"] for row in a.rows):
        values = _pairs(a, b, metric, category)
        if values is not None:
            found[category] = (len(values), detectable_difference(values[:, 0], values[:, 1]))
    return found


def changed_questions(a: RunResult, b: RunResult, metric: str) -> list[dict[str, Any]]:
    """The scored questions on which ``metric`` differs between the runs, with both answers,
    the largest change first."""
    rows_a, rows_b = a.by_question(), b.by_question()
    changed = []
    for q in scored_questions(a):
        x, y = rows_a[q].get(metric), rows_b.get(q, {}).get(metric)
        if x is None or y is None or x == y:
            continue
        changed.append({
            "question_id": q, "category": rows_a[q]["category"], "question": rows_a[q].get("question", ""),
            "gold": rows_a[q].get("gold", ""), "answer_a": rows_a[q].get("prediction", ""),
            "answer_b": rows_b[q].get("prediction", ""), "score_a": x, "score_b": y,
        })
    return sorted(changed, key=lambda c: (-abs(c["score_b"] - c["score_a"]), c["question_id"]))
