"""Causal links with no LLM: a trained pair classifier reads the new event with each earlier neighbour.

MAGMA's slow path asks an LLM for the causal links of a new event within its neighbourhood
(3.4, Eq. 8). With the local 1.5B model that graph stays empty (BENCHMARKS.md, issues 4 and 40).
This stand-in reads every (neighbour, new event) pair with CompassMem's trained
``PairRelationClassifier`` (``checkpoints/relation-classifier``: frozen MiniLM event vectors and
one linear head, distilled from the F.1 relation prompt's labels) and sums the probabilities of
the labels that say one event brings about the other (``causal_labels``: by default causal,
motivation, enablement). A pair scoring above ``threshold`` becomes a link, the neighbour the
cause and the new event the effect: the neighbourhood holds earlier events only
(``MagmaMemory.neighbourhood``), and the classifier reads a pair in time order and does not
tell its direction. At most ``max_links`` links per new event, the best scored, among its first
``max_neighbours`` neighbours (nearest hop first, as the memory gives them).

The classifier learnt pairs of one session's events ``d`` events apart; a MAGMA neighbourhood
has no such order, so every pair is read at ``distance`` (default 1, consecutive: the prompted
teacher relates consecutive events most often, and the neighbourhood's nearest hop is the
temporal chain). No call can fail short of a broken model, which raises (the memory's worker
counts it as a failed step).
"""

from __future__ import annotations

from memlab.bounds import NonNegativeInt, PositiveInt, UnitFloat
from memlab.stages.consolidate.base import CausalLink, ConsolidateIn, ConsolidateOut, Consolidator
from memlab.stages.relate.base import RELATION_LABELS
from memlab.stages.relate.neural import PairRelationClassifier

#: Relation labels that make a causal edge (MAGMA 3.2's causal graph: one event brings about another).
CAUSAL_LABELS: tuple[str, ...] = ("causal", "motivation", "enablement")


class ClassifierCausalConsolidator(Consolidator):
    """Causal links from a trained pair classifier (module docstring)."""

    def __init__(self, relation_classifier: PairRelationClassifier, causal_labels: list[str] | None = None,
                 threshold: UnitFloat = 0.5, max_neighbours: NonNegativeInt = 8, max_links: NonNegativeInt = 3,
                 distance: PositiveInt = 1) -> None:
        super().__init__()
        if not isinstance(relation_classifier, PairRelationClassifier):
            raise TypeError(f"ClassifierCausalConsolidator: relation_classifier must be a PairRelationClassifier, "
                            f"got {type(relation_classifier).__name__}")
        labels = list(CAUSAL_LABELS if causal_labels is None else causal_labels)
        unknown = [label for label in labels if label not in RELATION_LABELS or label not in relation_classifier.labels]
        if not labels or unknown:
            raise ValueError(f"ClassifierCausalConsolidator: causal_labels {unknown or labels} are not labels of the "
                             f"classifier ({list(relation_classifier.labels)})")
        self.relation_classifier = relation_classifier
        self.causal_labels = labels
        self.threshold = threshold
        self.max_neighbours = max_neighbours
        self.max_links = max_links
        self.distance = distance

    def causal_scores(self, pairs: list[tuple[str, str]]) -> list[float]:
        """The summed probability of ``causal_labels`` per (earlier text, later text) pair."""
        columns = [self.relation_classifier.labels.index(label) for label in self.causal_labels]
        probabilities = self.relation_classifier.label_probabilities(pairs, [self.distance] * len(pairs))
        return probabilities[:, columns].sum(-1).tolist() if pairs else []

    def forward(self, batch: list[ConsolidateIn]) -> list[ConsolidateOut]:
        asked = [[n for n in item.neighbours if n.id != item.event.id][: self.max_neighbours] for item in batch]
        pairs = [(n.text, item.event.text) for item, neighbours in zip(batch, asked) for n in neighbours]
        scores = iter(self.causal_scores(pairs))
        out = []
        for item, neighbours in zip(batch, asked):
            scored = [(next(scores), n) for n in neighbours]
            kept = sorted(((score, n) for score, n in scored if score > self.threshold
                           and not (n.timestamp and item.event.timestamp and n.timestamp > item.event.timestamp)),
                          key=lambda pair: -pair[0])  # a cause cannot follow its effect
            out.append(ConsolidateOut(links=tuple(CausalLink(n.id, item.event.id, round(score, 4))
                                                  for score, n in kept[: self.max_links])))
        return out
