from memlab.stages.traverse.base import TraverseIn, TraverseOut, Traverser
from memlab.stages.traverse.policy import DEFAULT_WEIGHTS, EDGE_TYPES, INTENTS, TraversalPolicy

__all__ = ["DEFAULT_WEIGHTS", "EDGE_TYPES", "INTENTS", "TraversalPolicy", "TraverseIn", "TraverseOut", "Traverser"]
