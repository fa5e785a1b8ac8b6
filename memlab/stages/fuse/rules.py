"""Node fusion with no LLM: a similarity threshold for merging, a relation extractor for linking.

Written by memlab: CompassMem decides fusion with one LLM call per pair (appendix F.1
"Event Coreference & Overlap"); ``ClassifierFuser`` makes the same three-way decision from
what construction already has, so a build with trained stages needs no LLM call.

* ``same_event`` when the pair's cosine similarity (``FuseIn.similarity``, the pipeline's
  embedding of the two events) is at least ``same_event_similarity``, default 0.95, above the
  pipeline's ``merge_threshold`` (0.9, below which no pair merges). In a small check
  with the packaged MiniLM, paraphrases of one event scored 0.92-0.96 and different events of
  one person on one topic ("researching adoption agencies" / "applied to an adoption agency")
  up to 0.87: 0.95 merges only close restatements and errs towards keeping events apart, which
  costs a duplicate node (linked to the other by the classifier) rather than a lost event.
* Otherwise the injected ``relation_extractor`` (any ``RelationExtractor``: the trained
  ``PairRelationClassifier``, or the prompted one) reads the pair as a two-event session,
  (existing, new) in that order, the existing event being the earlier one: no relation -> the
  new event is a node of its own; a relation -> linked with its label, read existing -> new
  (a relation it gives new -> existing is turned round by ``canonical_relation``).
* A failed extractor call keeps the new event apart, ``error`` set (the family's rule).
"""

from __future__ import annotations

from memlab.bounds import UnitFloat
from memlab.stages.fuse.base import EventFuser, FuseIn, FuseOut
from memlab.stages.relate.base import RelateIn, RelationExtractor
from memlab.stages.relate.neural import canonical_relation


class ClassifierFuser(EventFuser):
    """Merge above ``same_event_similarity``, else link or keep apart as the relation extractor says (module docstring)."""

    def __init__(self, relation_extractor: RelationExtractor, same_event_similarity: UnitFloat = 0.95) -> None:
        super().__init__()
        if not isinstance(relation_extractor, RelationExtractor):
            raise TypeError(f"ClassifierFuser: relation_extractor must be a RelationExtractor, "
                            f"got {type(relation_extractor).__name__}")
        self.relation_extractor = relation_extractor
        self.same_event_similarity = same_event_similarity

    def forward(self, batch: list[FuseIn]) -> list[FuseOut]:
        out = [FuseOut(same_event=True, reasoning=f"similarity {item.similarity:.3f} >= {self.same_event_similarity}")
               if item.similarity >= self.same_event_similarity else None for item in batch]
        asked = [i for i, decided in enumerate(out) if decided is None]
        related = self.relation_extractor([RelateIn((batch[i].existing, batch[i].new)) for i in asked]) if asked else []
        for i, result in zip(asked, related):
            if result.error:
                out[i] = FuseOut(error=result.error)
            elif result.relations:
                label = canonical_relation(result.relations[0]).label
                out[i] = FuseOut(has_overlap=True, relation=label, reasoning=f"classified {label}")
            else:
                out[i] = FuseOut(reasoning="classified none")
        return out
