"""EMem and EMem-G (elementary discourse units, their arguments and the graph over both): the
pipelines and their memory."""

from memlab.pipelines.emem.pipeline import EMem, EMemG, EventMemoryPipeline

__all__ = ["EMem", "EMemG", "EventMemoryPipeline"]
