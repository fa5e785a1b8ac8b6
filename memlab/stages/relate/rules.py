"""The rule baselines of the relate family, no model.

``MajorityRelationExtractor(label)`` gives every canonical pair of a session (``i < j``, session
order, as ``PairRelationClassifier`` classifies them) the relation ``label``; with ``label="none"``
(the default, and the majority label of the teacher's pairs) it gives no relation at all. It is
what a trained extractor is measured against ("majority relation").

``AdjacentRelationExtractor(label)`` relates each event to the next one of its session with
``label`` and nothing else: the prompted teacher chains consecutive events (74% of its relations
join them; BENCHMARKS.md), so a trained extractor must beat this rule too ("adjacent relation").
"""

from __future__ import annotations

from memlab.stages.relate.base import NO_RELATION, RELATION_LABELS, RelateIn, RelateOut, Relation, RelationExtractor
from memlab.stages.relate.neural import canonical_pairs


def _checked(owner: str, label: str, allow_none: bool) -> str:
    if label not in RELATION_LABELS and not (allow_none and label == NO_RELATION):
        allowed = ([NO_RELATION] if allow_none else []) + list(RELATION_LABELS)
        raise ValueError(f"{owner}: label {label!r} is not one of {allowed}")
    return label


class MajorityRelationExtractor(RelationExtractor):
    """Every canonical pair gets ``label`` (``none``: no relations); module docstring."""

    def __init__(self, label: str = NO_RELATION) -> None:
        super().__init__()
        self.label = _checked("MajorityRelationExtractor", label, allow_none=True)

    def forward(self, batch: list[RelateIn]) -> list[RelateOut]:
        if self.label == NO_RELATION:
            return [RelateOut() for _ in batch]
        return [RelateOut(tuple(Relation(i, j, self.label) for i, j in canonical_pairs(len(item.events))))
                for item in batch]


class AdjacentRelationExtractor(RelationExtractor):
    """Each event related to the next one of its session by ``label``; module docstring."""

    def __init__(self, label: str = "enablement") -> None:
        super().__init__()
        self.label = _checked("AdjacentRelationExtractor", label, allow_none=False)

    def forward(self, batch: list[RelateIn]) -> list[RelateOut]:
        return [RelateOut(tuple(Relation(i, i + 1, self.label) for i in range(len(item.events) - 1))) for item in batch]
