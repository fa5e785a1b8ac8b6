from memlab.stages.relate.base import (
                                       NO_RELATION,
                                       RELATION_LABELS,
                                       RelateIn,
                                       RelateOut,
                                       Relation,
                                       RelationExtractor,
                                       normalise_label,
)
from memlab.stages.relate.neural import (
                                       PAIR_LABELS,
                                       PairRelationClassifier,
                                       canonical_pairs,
                                       canonical_relation,
                                       event_text,
)
from memlab.stages.relate.prompted import PromptedRelationExtractor
from memlab.stages.relate.rules import AdjacentRelationExtractor, MajorityRelationExtractor

__all__ = ["NO_RELATION", "PAIR_LABELS", "RELATION_LABELS", "AdjacentRelationExtractor", "MajorityRelationExtractor",
           "PairRelationClassifier", "PromptedRelationExtractor", "RelateIn", "RelateOut", "Relation",
           "RelationExtractor", "canonical_pairs", "canonical_relation", "event_text", "normalise_label"]
