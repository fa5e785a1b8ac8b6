"""Similarity thresholds carried between embedders by percentile (``memlab.embed.similarity``) and
the calibration script on the embedded sample."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memlab.embed.similarity import (
    cross_group_percentile,
    nearest_earlier_similarities,
    percentile_of,
    value_at,
)

REPO = Path(__file__).resolve().parents[2]


def angles(degrees) -> np.ndarray:
    """Unit vectors in the plane at these angles (the cosine of two is the cosine of their difference)."""
    radians = np.radians(np.asarray(degrees, dtype=float))
    return np.stack([np.cos(radians), np.sin(radians)], axis=1)


def test_nearest_earlier_similarity_looks_only_at_earlier_steps():
    vectors = angles([0, 90, 10, 80, 45])
    found = nearest_earlier_similarities(vectors * 3.0, [0, 0, 1, 1, 2])  # lengths do not matter
    assert found == pytest.approx(np.cos(np.radians([10, 10, 35])), abs=1e-6)
    assert len(nearest_earlier_similarities(vectors, [0] * 5)) == 0


def test_a_threshold_keeps_its_selectivity_under_another_embedder():
    # two "embedders" of the same ten events: the second spreads the same order over a narrower, higher range
    steps = [0, 0, 1, 1, 1, 2, 2, 2, 3, 3]
    first = angles([0, 40, 5, 30, 60, 2, 45, 70, 1, 20])
    second = angles([0, 20, 2.5, 15, 30, 1, 22.5, 35, 0.5, 10])
    a, b = nearest_earlier_similarities(first, steps), nearest_earlier_similarities(second, steps)
    assert all(b[i] < b[j] for i in range(len(a)) for j in range(len(a)) if a[i] < a[j] - 1e-5)  # same ranking
    threshold = float(np.cos(np.radians(4)))  # between the 1- and 5-degree neighbours under the first
    share = percentile_of(threshold, a)
    carried = value_at(share, b)
    assert percentile_of(carried, b) == pytest.approx(share, abs=100 / len(b))
    assert carried > threshold  # the narrower embedder needs a higher cosine for the same selectivity
    assert sum(x >= threshold for x in a) == sum(x >= carried for x in b)
    with pytest.raises(ValueError, match="empty"):
        value_at(50, np.zeros(0))
    assert cross_group_percentile(angles([0, 90, 0]), ["a", "b", "b"], 100) == pytest.approx(1.0)


def test_a_configs_thresholds_are_read_as_percentiles_of_its_events():
    from memlab.config import build_pipeline
    from memlab.data.select import load_conversations
    from memlab.pipelines.compassmem.thresholds import earlier_event_similarities, threshold_percentiles

    pipeline = build_pipeline(REPO / "configs/pipelines/compassmem.yaml")[0]
    segmenter = build_pipeline(REPO / "configs/pipelines/compassmem_trained_construction.yaml")[0].segmenter
    conversations = load_conversations(REPO / "memlab/data/samples/sample_locomo.json", ["sample-1"])
    sample = earlier_event_similarities(segmenter, pipeline.embedder, conversations)
    result = threshold_percentiles(pipeline, sample, 50)
    assert result["events"] > 0 and result["merge_threshold"]["value"] == 0.9
    assert 0 <= result["merge_threshold"]["percentile"] <= 100
    assert result["at_percentile"]["value"] == pytest.approx(result["quartiles"][1])
    with pytest.raises(ValueError, match="no event after"):
        threshold_percentiles(pipeline, np.zeros(0))
