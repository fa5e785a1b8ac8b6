from memlab.stages.relate.base import (NO_RELATION, RELATION_LABELS, RelateIn, RelateOut, Relation, RelationExtractor,
                                       normalise_label)
from memlab.stages.relate.prompted import PromptedRelationExtractor

__all__ = ["NO_RELATION", "RELATION_LABELS", "PromptedRelationExtractor", "RelateIn", "RelateOut", "Relation",
           "RelationExtractor", "normalise_label"]
