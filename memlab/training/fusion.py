"""The fusion family (CompassMem's node fusion): how a fuser's reply is read, and how a fuser is
scored against a teacher on the pairs a build asks.

A build's fusion step asks its fuser about (new event, existing event) pairs; ``RecordingFuser``
stands in the fuser slot of a teacher pipeline (typically the prompted F.1 coreference call
replayed from the response cache) and keeps every pair and reply, unchanged. ``outcome`` reads a
reply as the pipeline does (merge, a relation edge, or no link); ``fusion_scores`` compares a
candidate fuser's outcomes on the same pairs with the teacher's. ``FuserEvaluator`` is the two as the
family's evaluator: ``memlab compare-stages configs/compare/fusers.yaml`` runs it.

``links_against_observations`` asks of a built memory whether the events its fusion links across
sessions are about the same thing by LoCoMo's observations: every event after the first session
has an e*, its most similar event of an earlier session (what fusion asks about), and the pair is
*related by the observations* when an observation citing a turn of one and an observation citing
a turn of the other are as similar as the ``percentile`` of cross-session observation pairs,
speaker names removed (the rule and threshold of ``memlab.training.observation_boundaries``).
The annotations are read by this evaluation, never by the pipeline. Pairs with no observation
on either side are counted apart. ``eval/fusion_vs_observations.py`` runs it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from memlab.config import PipelineConfig
from memlab.embed.similarity import cross_group_percentile, unit_rows
from memlab.pipelines.compassmem.pipeline import fusion_outcome
from memlab.stages.fuse import EventFuser, FuseIn, FuseOut
from memlab.training.evaluators import StageEvaluator, pipeline_label
from memlab.training.observation_boundaries import without_names
from memlab.training.relations import macro_f1
from memlab.training.teacher import TEACHER_CONFIG
from memlab.types import Conversation

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


@dataclass(frozen=True)
class FusionPairs:
    """Every (new, existing) pair the teacher's builds asked, with the teacher's reply, and the
    outcome the teacher's pipeline read from it."""

    asked: tuple[tuple[FuseIn, FuseOut], ...]
    outcomes: tuple[str, ...]
    merge_threshold: float


@dataclass
class FuserEvaluator(StageEvaluator[FusionPairs]):
    """Agreement of a fuser with the teacher's (``teacher``: a CompassMem config, by default the
    prompted F.1 coreference call replayed from the response cache) on the pairs the teacher's
    builds ask (``fusion_scores``), against the majority-outcome baseline. The candidate sees the
    teacher's events, so the score is the fusion decision alone, not the segmentation before it.
    Scoring no stage (None) gives the baseline alone."""

    family: ClassVar[type] = EventFuser
    configs: ClassVar[dict[str, str]] = {"teacher": "teacher_overrides"}

    metric: str = "macro_f1"
    teacher: PipelineConfig = TEACHER_CONFIG
    teacher_overrides: list[str] = field(default_factory=list)

    def prepare(self, conversations: Sequence[Conversation]) -> FusionPairs:
        """The teacher's pairs; a ValueError when its builds ask none (one session each)."""
        teacher = self.pipeline_named("teacher")
        teacher.eval()
        recorder = RecordingFuser(teacher.fuser)
        configured = teacher.replace("fuser", recorder)
        try:
            for conversation in conversations:
                teacher.build(conversation.history())
        finally:
            teacher.replace("fuser", configured)
        if not recorder.asked:
            raise ValueError(f"{[c.id for c in conversations]}: the builds of {pipeline_label(self.teacher)} asked "
                             "no fusion pair (one session each?)")
        return FusionPairs(tuple(recorder.asked), tuple(outcome(out, item, teacher.construction.merge_threshold)
                                                        for item, out in recorder.asked), teacher.construction.merge_threshold)

    def score(self, stage: Any, prepared: FusionPairs) -> dict[str, Any]:
        gold = list(prepared.outcomes)
        majority = Counter(gold).most_common(1)[0][0]
        result: dict[str, Any] = {"pairs": len(gold), "teacher": dict(Counter(gold)),
                                  "teacher_failed": sum(out.error is not None for _, out in prepared.asked),
                                  "majority": majority, "majority_scores": fusion_scores(gold, [majority] * len(gold)),
                                  "teacher_pipeline": pipeline_label(self.teacher)}
        if stage is not None:
            pairs = [item for item, _ in prepared.asked]
            predicted = [outcome(out, item, prepared.merge_threshold) for item, out in zip(pairs, stage(pairs))]
            result.update(fusion_scores(gold, predicted), candidate=dict(Counter(predicted)))
        return result

    def headline(self, result: dict[str, Any]) -> dict[str, tuple[float | None, int]]:
        scores = result if "macro_f1" in result else result["majority_scores"]  # no stage: the baseline
        return {k: (scores[k], result["pairs"]) for k in ("accuracy", "macro_f1", "link_agreement", "link_f1")}


def observation_vectors(conversation, embedder) -> tuple[dict[str, list[int]], np.ndarray, list[str]]:
    """Per turn id, the indices of the observations citing it; the observations' unit vectors
    (speaker names removed); each one's session id."""
    by_turn: dict[str, list[int]] = defaultdict(list)
    texts, sessions = [], []
    for annotation in conversation.annotations:
        for observation in annotation.observations:
            for turn_id in observation.source_ids:
                by_turn[turn_id].append(len(texts))
            texts.append(without_names(observation.text, conversation.speakers))
            sessions.append(annotation.session_id)
    return by_turn, unit_rows(embedder.encode(texts)), sessions


def links_against_observations(memory, conversation, embedder, percentile: float = 90.0) -> dict[str, Any]:
    """The counts of ``memory``'s (e*, event) pairs (module docstring): ``pairs``, ``related``,
    ``linked``, ``linked_related`` and ``no_observation``, with the observation ``threshold``."""
    if not conversation.annotations:
        raise ValueError(f"{conversation.id}: no observation annotations to score the links against")
    by_turn, facts, fact_sessions = observation_vectors(conversation, embedder)
    threshold = cross_group_percentile(facts, fact_sessions, percentile)
    events = [memory.unit(i) for i in memory.events()]
    order = {s.id: n for n, s in enumerate(conversation.sessions)}
    step = {e.id: order.get(e.session, -1) for e in events}
    vectors = unit_rows(memory.index.vectors([e.id for e in events]))
    linked = {frozenset((u, v)) for u, v, _ in memory.graph.edges("relation")}
    counts: dict[str, Any] = defaultdict(int)
    for i, event in enumerate(events):
        earlier = [j for j, other in enumerate(events) if step[other.id] < step[event.id]]
        if not earlier:
            continue
        nearest = earlier[int(np.argmax(vectors[earlier] @ vectors[i]))]
        mine = [k for t in event.source_ids for k in by_turn.get(t, ())]
        theirs = [k for t in events[nearest].source_ids for k in by_turn.get(t, ())]
        if not mine or not theirs:
            counts["no_observation"] += 1
            continue
        related = float((facts[mine] @ facts[theirs].T).max()) >= threshold
        is_linked = frozenset((event.id, events[nearest].id)) in linked
        counts["pairs"] += 1
        counts["related"] += related
        counts["linked"] += is_linked
        counts["linked_related"] += is_linked and related
    return {"threshold": round(threshold, 4), **counts}


def link_agreement(row: dict[str, Any]) -> dict[str, Any]:
    """``row``'s counts with the base rate, and the links' precision and recall against the observations."""
    pairs, related, linked, hits = (row.get(k, 0) for k in ("pairs", "related", "linked", "linked_related"))
    return {**row, "base_rate": round(related / pairs, 3) if pairs else None,
            "precision": round(hits / linked, 3) if linked else None,
            "recall": round(hits / related, 3) if related else None}
