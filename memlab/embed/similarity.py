"""What a cosine means for one embedder: similarity thresholds as percentiles of its own distribution.

An absolute threshold (CompassMem's 0.9, B.2) belongs to the embedder it was set with: all-MiniLM-L6-v2,
EmbeddingGemma and BGE-M3 spread the same pairs over different ranges. Expressed as a percentile of
the embedder's similarities on comparable pairs, it carries over: ``percentile_of(0.9, sample)``
under one embedder, then ``value_at(that percentile, sample)`` under another, gives the threshold that
is as selective for the second (``eval/calibrate_thresholds.py`` does this on dev conversations).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """``vectors`` (rows) scaled to unit length (zero rows stay zero)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True).clip(min=1e-12)


def cross_group_percentile(vectors: np.ndarray, groups: Sequence[str], percentile: float) -> float:
    """The ``percentile`` of the cosines between rows of different ``groups`` (one name per row);
    rows all of one group have no such pair, an error."""
    unit = unit_rows(vectors)
    labels = np.asarray(groups)
    upper = np.triu(np.ones(len(labels), dtype=bool), k=1)
    cross = (unit @ unit.T)[upper & (labels[:, None] != labels[None, :])]
    if not cross.size:
        raise ValueError("cross_group_percentile: needs rows of at least two groups")
    return float(np.percentile(cross, percentile))


def nearest_earlier_similarities(vectors: np.ndarray, steps: Sequence[int]) -> np.ndarray:
    """For each row of a step after the first, its highest cosine to a row of an earlier step
    (``steps``: the step of each row, e.g. its session's index): what CompassMem's fusion
    compares with ``merge_threshold`` (a new event and its most similar earlier event e*)."""
    unit = unit_rows(vectors)
    steps = np.asarray(steps)
    found = [float((unit[steps < step] @ unit[i]).max()) for i, step in enumerate(steps) if (steps < step).any()]
    return np.asarray(found, dtype=np.float32)


def percentile_of(value: float, sample: np.ndarray) -> float:
    """The share of ``sample`` below ``value``, in percent (0-100)."""
    if not len(sample):
        raise ValueError("percentile_of: empty sample")
    return float(100.0 * (np.asarray(sample) < value).mean())


def value_at(percentile: float, sample: np.ndarray) -> float:
    """The ``percentile`` (0-100) of ``sample``."""
    if not len(sample):
        raise ValueError("value_at: empty sample")
    return float(np.percentile(np.asarray(sample), percentile))
