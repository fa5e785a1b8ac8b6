"""CompassMem (event-centric memory as a logic map): the pipeline, its event memory, its topic
layer and its explorer search."""

from memlab.pipelines.compassmem.pipeline import CompassMem

__all__ = ["CompassMem"]
