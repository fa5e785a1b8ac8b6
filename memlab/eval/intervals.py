"""95% intervals for the figures memlab prints: a percentile bootstrap over questions for a mean
of per-question scores (F1, BLEU, recall, a graded judge), Wilson's score interval for a share of
0/1 verdicts (a CORRECT / WRONG judge), and the smallest difference a question count can
detect. Everything is seeded, so a figure is reproducible."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

#: z for a two-sided 95% interval, and for 80% power.
Z_95 = 1.959963984540054
Z_POWER_80 = 0.8416212335729143


def bootstrap_interval(values: Sequence[float] | np.ndarray, resamples: int = 10_000, confidence: float = 0.95,
                       seed: int = 0) -> tuple[float, float]:
    """The percentile-bootstrap interval of the mean of ``values`` (one per question)."""
    values = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    chunk = max(1, 2_000_000 // max(len(values), 1))  # bounded memory for long runs
    for start in range(0, resamples, chunk):
        size = min(chunk, resamples - start)
        means[start:start + size] = values[rng.integers(0, len(values), size=(size, len(values)))].mean(axis=1)
    tail = (1 - confidence) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))


def stratified_mean_interval(groups: Sequence[Sequence[float]], resamples: int = 10_000, confidence: float = 0.95,
                             seed: int = 0) -> tuple[float, float]:
    """The percentile-bootstrap interval of the unweighted mean of the groups' means (a macro
    average over question categories): each resample draws every group's questions again within
    that group, so each category keeps its size."""
    arrays = [np.asarray(g, dtype=float) for g in groups]
    if not arrays or any(len(a) == 0 for a in arrays):
        raise ValueError("stratified_mean_interval: every group needs at least one value")
    rng = np.random.default_rng(seed)
    means = np.zeros(resamples)
    for values in arrays:
        means += values[rng.integers(0, len(values), size=(resamples, len(values)))].mean(axis=1)
    means /= len(arrays)
    tail = (1 - confidence) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))


def wilson_interval(successes: int, n: int) -> tuple[float, float]:
    """Wilson's 95% score interval of the share ``successes / n`` (``n`` >= 1)."""
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"wilson_interval: need 0 <= successes <= n and n >= 1, got {successes} of {n}")
    p, z2 = successes / n, Z_95 ** 2
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z_95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def mean_interval(values: Sequence[float], resamples: int = 2_000) -> tuple[float, float] | None:
    """The 95% interval of the mean of ``values``: Wilson when every value is 0 or 1, else the
    bootstrap; None for no value."""
    if not values:
        return None
    if all(v in (0.0, 1.0) for v in values):
        return wilson_interval(int(sum(values)), len(values))
    return bootstrap_interval(values, resamples)


def detectable_difference(scores_a: Sequence[float], scores_b: Sequence[float]) -> float | None:
    """The smallest difference of mean scores that two runs over the same ``n`` questions
    would detect with 80% power in a two-sided 5% test, from the spread of their per-question
    scores, treated as independent (normal approximation): pairing can only make the real
    threshold smaller, so this is the conservative figure. None with fewer than two questions
    or no spread at all."""
    n = len(scores_a)
    if n != len(scores_b):
        raise ValueError(f"detectable_difference: {n} scores against {len(scores_b)}; give both runs' per question")
    if n < 2:
        return None
    variance = float(np.var(np.asarray(scores_a, dtype=float), ddof=1) + np.var(np.asarray(scores_b, dtype=float), ddof=1))
    return (Z_95 + Z_POWER_80) * math.sqrt(variance / n) if variance > 0 else None
