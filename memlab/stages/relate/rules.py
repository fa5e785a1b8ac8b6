"""The majority baseline of the relate family: one label for every pair, no model.

``MajorityRelationExtractor(label)`` gives every canonical pair of a session (``i < j``, session
order, as ``PairRelationClassifier`` classifies them) the relation ``label``; with ``label="none"``
(the default, and the majority label of the teacher's pairs) it gives no relation at all. It is
what a trained extractor is measured against ("majority relation").
"""

from __future__ import annotations

from memlab.stages.relate.base import NO_RELATION, RELATION_LABELS, RelateIn, RelateOut, Relation, RelationExtractor
from memlab.stages.relate.neural import canonical_pairs


class MajorityRelationExtractor(RelationExtractor):
    """Every canonical pair gets ``label`` (``none``: no relations); module docstring."""

    def __init__(self, label: str = NO_RELATION) -> None:
        super().__init__()
        if label != NO_RELATION and label not in RELATION_LABELS:
            raise ValueError(f"MajorityRelationExtractor: label {label!r} is not {NO_RELATION!r} "
                             f"or one of {list(RELATION_LABELS)}")
        self.label = label

    def forward(self, batch: list[RelateIn]) -> list[RelateOut]:
        if self.label == NO_RELATION:
            return [RelateOut() for _ in batch]
        return [RelateOut(tuple(Relation(i, j, self.label) for i, j in canonical_pairs(len(item.events))))
                for item in batch]
