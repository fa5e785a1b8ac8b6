"""The fusion family (CompassMem's node fusion): how a fuser's reply is read, and how a fuser is
scored against a teacher on the pairs a build asks.

A build's fusion step asks its fuser about (new event, existing event) pairs; ``RecordingFuser``
stands in the fuser slot of a teacher pipeline (typically the prompted F.1 coreference call
replayed from the response cache) and keeps every pair and reply, unchanged. ``outcome`` reads a
reply as the pipeline does (merge, a relation edge, or no link); ``fusion_scores`` compares a
candidate fuser's outcomes on the same pairs with the teacher's. ``eval/compare_fusers.py`` runs it.
"""

from __future__ import annotations

from memlab.pipelines.compassmem.pipeline import fusion_outcome
from memlab.stages.fuse import EventFuser, FuseIn, FuseOut
from memlab.training.relations import macro_f1

#: What a fusion step can do with a (new, existing) event pair.
OUTCOMES = ("merge", "link", "none")


class RecordingFuser(EventFuser):
    """The teacher's fuser, unchanged, keeping every pair it is asked and its reply."""

    def __init__(self, fuser: EventFuser) -> None:
        super().__init__()
        self.fuser = fuser
        self.asked: list[tuple[FuseIn, FuseOut]] = []

    def forward(self, batch: list[FuseIn]) -> list[FuseOut]:
        out = self.fuser(batch)
        self.asked.extend(zip(batch, out))
        return out


def outcome(out: FuseOut, item: FuseIn, merge_threshold: float) -> str:
    """merge / link / none, as the pipeline reads the reply (e* only: a pair may merge above the threshold)."""
    decided = fusion_outcome(out, item.similarity >= merge_threshold)
    return "none" if decided is None else "merge" if decided == "merge" else "link"


def fusion_scores(gold: list[str], predicted: list[str]) -> dict[str, float | None]:
    """Accuracy and macro-F1 (``memlab.training.relations.macro_f1``) of ``predicted`` outcomes
    against ``gold`` over merge / link / none, and the agreement and F1 of linking at all."""
    linked = [g != "none" for g in gold], [p != "none" for p in predicted]
    tp = sum(g and p for g, p in zip(*linked))
    return {"accuracy": sum(g == p for g, p in zip(gold, predicted)) / len(gold),
            "macro_f1": macro_f1(gold, predicted, OUTCOMES),
            "link_agreement": sum(g == p for g, p in zip(*linked)) / len(gold),
            "link_f1": 2 * tp / (sum(linked[0]) + sum(linked[1])) if sum(linked[0]) + sum(linked[1]) else 0.0}
