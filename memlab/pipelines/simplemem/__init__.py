"""SimpleMem (semantic compression, online synthesis, intent-aware retrieval planning): the pipeline."""

from memlab.pipelines.simplemem.pipeline import SimpleMem

__all__ = ["SimpleMem"]
