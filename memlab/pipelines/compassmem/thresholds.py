"""Carry CompassMem's similarity thresholds from one embedder to another (BENCHMARKS.md, "Issue 40").

A segmenter cuts each conversation into events and an embedder embeds them as CompassMem does (the
event text). ``earlier_event_similarities`` is every event's highest cosine to an event of an
earlier session (``nearest_earlier_similarities``: the value fusion compares with
``merge_threshold``), pooled over the conversations; ``threshold_percentiles`` places a CompassMem
pipeline's ``merge_threshold`` and ``topic_threshold`` in that sample, and gives the cosine at a
percentile. Read the percentile on the reference embedder, then the cosine at it on another: its
threshold of the same selectivity. ``eval/calibrate_thresholds.py`` prints it for a config.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from memlab.embed.similarity import nearest_earlier_similarities, percentile_of, value_at
from memlab.stages.segment import SegmentIn
from memlab.types import Conversation


def earlier_event_similarities(segmenter: Any, embedder: Any, conversations: Iterable[Conversation]) -> np.ndarray:
    """Every event's highest cosine to an event of an earlier session of its conversation."""
    samples = []
    for conversation in conversations:
        history = conversation.history()
        sessions = [s for s in history.sessions if s.turns]
        outputs = segmenter([SegmentIn(history.id, s) for s in sessions])
        units = [(step, unit) for step, out in enumerate(outputs) for unit in out.units]
        vectors = embedder.encode([unit.text for _, unit in units])
        samples.append(nearest_earlier_similarities(vectors, [step for step, _ in units]))
    return np.concatenate(samples) if samples else np.zeros(0)


def threshold_percentiles(pipeline: Any, sample: np.ndarray, percentile: float | None = None) -> dict[str, Any]:
    """The sample's size and quartiles, the percentile ``pipeline``'s two thresholds (``construction``) have in it and,
    with ``percentile``, the cosine there. ``ValueError`` on an empty sample."""
    if not len(sample):
        raise ValueError("no event after a conversation's first session to measure")
    result: dict[str, Any] = {
        "events": int(len(sample)), "quartiles": [round(value_at(p, sample), 4) for p in (25, 50, 75)],
        **{name: {"value": value, "percentile": round(percentile_of(value, sample), 2)}
           for name, value in (("merge_threshold", pipeline.construction.merge_threshold),
                               ("topic_threshold", pipeline.construction.topic_threshold))},
    }
    if percentile is not None:
        result["at_percentile"] = {"percentile": percentile, "value": round(value_at(percentile, sample), 4)}
    return result
