"""Two runs over the same questions, compared question by question: the paired difference of a
metric with a bootstrap confidence interval and a sign test, and the questions whose score changed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import binomtest

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


def bootstrap_interval(values: np.ndarray, resamples: int = 10_000, confidence: float = 0.95,
                       seed: int = 0) -> tuple[float, float]:
    """The percentile-bootstrap interval of the mean of ``values`` (one per question), seeded so
    that a figure is reproducible."""
    values = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(resamples, len(values)))].mean(axis=1)
    tail = (1 - confidence) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))


def paired_difference(a: RunResult, b: RunResult, metric: str, resamples: int = 10_000,
                      confidence: float = 0.95, seed: int = 0) -> PairedDifference | None:
    """``metric`` of ``b`` minus ``a`` over the questions both scored (None when there are none,
    e.g. a retrieval-only run has no F1). The bootstrap resamples questions (seeded, so a report
    is reproducible)."""
    rows_a, rows_b = a.by_question(), b.by_question()
    pairs = [(rows_a[q].get(metric), rows_b[q].get(metric)) for q in scored_questions(a) if q in rows_b]
    pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
    if not pairs:
        return None
    values = np.array(pairs, dtype=float)
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
