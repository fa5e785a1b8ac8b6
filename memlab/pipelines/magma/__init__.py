"""MAGMA (a multi-graph memory of events, traversed by an intent-routed policy): the pipeline,
its memory and consolidation, and the narrative it linearises for the answerer."""

from memlab.pipelines.magma.pipeline import MAGMA

__all__ = ["MAGMA"]
