"""Relation supervision from the teacher, and how a relation extractor is scored against it.

Labels (``pair_labels``, ``relation_examples``): distillation of CompassMem's prompted relation
extractor (appendix F.1 "Event Relation Extraction", the teacher config's 1.5B model) as
``memlab.training.teacher`` replays it from the response cache. For every unordered pair
``i < j`` of a teacher session's events (session order, the classifier's canonical pairs), the
label is the teacher's relation on that pair, else ``none``. A relation the teacher gave the
other way round (``j -> i``) is turned round by ``canonical_relation``: ``temporal_before`` <->
``temporal_after`` swapped, every other label kept. The event texts are what
``PairRelationClassifier`` reads at inference (``event_text`` of the pipeline's ``event_view``).

Evaluation (``evaluate_relation_extractor``): the extractor is asked of each teacher session's
events what ``CompassMem.relate`` asks (``relate_input``); its relations are put on canonical pairs
the same way and every pair is scored: accuracy and macro-F1 over all pairs (``none``
included), macro-F1 over the relation labels only, and the same figures for the majority
label of the evaluated pairs ("majority relation", the baseline). Sessions whose teacher calls
failed are left out of both by default (a failed relation call gave no relations: its pairs
would all read ``none``).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import datasets
import torch

from memlab.clock import active_seconds
from memlab.config import PipelineConfig
from memlab.pipelines.compassmem.memory import event_view
from memlab.pipelines.compassmem.pipeline import relate_input
from memlab.stages.event_view import EventView
from memlab.stages.relate import (
    NO_RELATION,
    PAIR_LABELS,
    Relation,
    RelationExtractor,
    canonical_pairs,
    canonical_relation,
    event_text,
)
from memlab.training.evaluators import StageEvaluator, pipeline_label
from memlab.training.supervision import dataset_with_card
from memlab.training.teacher import TEACHER_CONFIG, TeacherLabels, TeacherSession, teacher_labels
from memlab.types import Conversation

RELATION_FEATURES = datasets.Features({
    "conversation_id": datasets.Value("string"),
    "session_id": datasets.Value("string"),
    "source": datasets.Value("int64"),
    "target": datasets.Value("int64"),
    "earlier": datasets.Value("string"),
    "later": datasets.Value("string"),
    "label": datasets.Value("string"),
    "teacher_failed": datasets.Value("bool"),
})
_COUNTS_LINE = "Label counts (JSON): "


def session_views(session: TeacherSession) -> tuple[EventView, ...]:
    """The session's events as the pipeline shows them to its relation extractor (``N0``, ``N1`` ...)."""
    return tuple(event_view(f"N{i}", unit) for i, unit in enumerate(session.events))


def canonical_labels(relations: Sequence[Relation], n_events: int) -> list[str]:
    """The label of every canonical pair of ``n_events`` events (``canonical_pairs`` order):
    the relation on that pair, turned round when given later -> earlier, else ``none``. The
    first relation on a pair wins; one naming an event out of range or itself is ignored."""
    on_pair: dict[tuple[int, int], str] = {}
    for relation in relations:
        if relation.source == relation.target or not (0 <= min(relation.source, relation.target)
                                                       and max(relation.source, relation.target) < n_events):
            continue
        relation = canonical_relation(relation)
        on_pair.setdefault((relation.source, relation.target), relation.label)
    return [on_pair.get(pair, NO_RELATION) for pair in canonical_pairs(n_events)]


def pair_labels(session: TeacherSession) -> list[tuple[int, int, str]]:
    """``(i, j, label)`` for every canonical pair of the teacher session (module docstring)."""
    n = len(session.events)
    return [(i, j, label) for (i, j), label in zip(canonical_pairs(n), canonical_labels(session.relations, n))]


def _kept(sessions: Sequence[TeacherSession], keep_failed: bool) -> tuple[list[TeacherSession], Counter]:
    kept, skipped = [], Counter()
    for session in sessions:
        if session.relations_failed and not keep_failed:
            skipped["teacher_failed"] += 1
        elif len(session.events) < 2:
            skipped["fewer_than_two_events"] += 1
        else:
            kept.append(session)
    return kept, skipped


def relation_examples(teacher_sessions: Sequence[TeacherSession], keep_failed: bool = False,
                      teacher_counts: Mapping[str, int] | None = None,
                      teacher_config: str = TEACHER_CONFIG) -> datasets.Dataset:
    """One row per canonical event pair of the teacher sessions, labelled as the module docstring
    says. ``keep_failed``: also the sessions whose teacher calls failed (left out by default).
    ``teacher_counts``: what ``teacher_sessions`` counted (sessions not cached), for the card."""
    kept, skipped = _kept(teacher_sessions, keep_failed)
    rows = []
    for session in kept:
        texts = [event_text(view) for view in session_views(session)]
        for i, j, label in pair_labels(session):
            rows.append({"conversation_id": session.conversation_id, "session_id": session.session.id,
                         "source": i, "target": j, "earlier": texts[i], "later": texts[j], "label": label,
                         "teacher_failed": session.relations_failed})
    counts = Counter(row["label"] for row in rows)
    card = f"""memlab relation supervision (memlab.training.relations.relation_examples).
Rows: one unordered pair (source < target, session order) of the events of one teacher session; earlier / later:
the two events as PairRelationClassifier reads them (event_text). Label source: DISTILLATION of CompassMem's prompted
relation extractor (appendix F.1 "Event Relation Extraction" prompt, the model of {teacher_config}: the default 1.5B
model), replayed from the response cache by memlab.training.teacher (no model was called, no gold data read).
Mapping: the teacher's relation on the pair, its predicate normalised onto RELATION_LABELS; a relation given later ->
earlier is turned round (temporal_before <-> temporal_after swapped, other labels kept); a pair with none is "none".
Conversations: {sorted({s.conversation_id for s in kept})}.
Sessions used: {len(kept)} of the {len(teacher_sessions)} replayed (keep_failed={keep_failed}); skipped here: {dict(skipped)};
the teacher replay's counts (not_cached: skipped there): {dict(teacher_counts or {})}. Pairs: {len(rows)}.
{_COUNTS_LINE}{json.dumps({label: counts[label] for label in PAIR_LABELS if counts[label]})}"""
    return dataset_with_card(rows, RELATION_FEATURES, card)


def label_counts(dataset: datasets.Dataset) -> dict[str, int]:
    """The per-label pair counts ``relation_examples`` recorded in its card."""
    for line in (dataset.info.description or "").splitlines():
        if line.startswith(_COUNTS_LINE):
            return json.loads(line[len(_COUNTS_LINE):])
    raise ValueError("label_counts: the dataset was not made by relation_examples (no counts in its card)")


def class_weights(labels: Sequence[str], classes: Sequence[str], power: float = 0.5) -> torch.Tensor:
    """One loss weight per class: ``(n / (k * n_c)) ** power`` over the ``k`` classes present in
    ``labels`` (``power`` 1: inverse frequency, 0: unweighted); an absent class gets 1."""
    counts = Counter(labels)
    present = [c for c in classes if counts[c]]
    if not present:
        raise ValueError("class_weights: no label of the given classes")
    n = sum(counts[c] for c in present)
    return torch.tensor([(n / (len(present) * counts[c])) ** power if counts[c] else 1.0 for c in classes])


# -- scores -------------------------------------------------------------------------------
def macro_f1(gold: Sequence[str], predicted: Sequence[str], classes: Sequence[str]) -> float | None:
    """Mean F1 over the ``classes`` that occur in ``gold`` or ``predicted`` (None: none does)."""
    if len(gold) != len(predicted):
        raise ValueError(f"macro_f1: {len(gold)} gold labels for {len(predicted)} predictions")
    scores = []
    for label in classes:
        true_positive = sum(g == p == label for g, p in zip(gold, predicted))
        gold_n, predicted_n = sum(g == label for g in gold), sum(p == label for p in predicted)
        if gold_n or predicted_n:
            scores.append(2 * true_positive / (gold_n + predicted_n))
    return sum(scores) / len(scores) if scores else None


def relation_scores(gold: Sequence[str], predicted: Sequence[str]) -> dict[str, float | None]:
    """Accuracy and macro-F1 over all pairs (``none`` included), macro-F1 over relation labels only."""
    if not gold:
        raise ValueError("relation_scores: no pair to score")
    relations = [label for label in PAIR_LABELS if label != NO_RELATION]
    return {"accuracy": sum(g == p for g, p in zip(gold, predicted)) / len(gold),
            "macro_f1": macro_f1(gold, predicted, PAIR_LABELS),
            "macro_f1_relations": macro_f1(gold, predicted, relations)}


def majority_label(labels: Sequence[str]) -> str:
    """The most frequent label (ties: the first in ``PAIR_LABELS`` order)."""
    counts = Counter(labels)
    return max(PAIR_LABELS, key=lambda label: (counts[label], -PAIR_LABELS.index(label)))


def evaluate_relation_extractor(extractor: "RelationExtractor", teacher_sessions: Sequence[TeacherSession],
                                keep_failed: bool = False, batch_size: int = 8) -> dict[str, Any]:
    """The extractor's pair labels against the teacher's on every canonical pair (module
    docstring), with the majority-relation baseline of the same pairs."""
    kept, skipped = _kept(teacher_sessions, keep_failed)
    if not kept:
        raise ValueError(f"evaluate_relation_extractor: no teacher session with two events or more to score "
                         f"({len(teacher_sessions)} given, skipped {dict(skipped)})")
    gold: list[str] = []
    predicted: list[str] = []
    errors, started = 0, active_seconds()
    for start in range(0, len(kept), batch_size):
        chunk = kept[start:start + batch_size]
        outputs = extractor([relate_input(s.session, list(s.events)) for s in chunk])
        for session, out in zip(chunk, outputs):
            n = len(session.events)
            gold += canonical_labels(session.relations, n)
            predicted += canonical_labels(out.relations, n)
            errors += out.error is not None
    seconds = active_seconds() - started
    majority = majority_label(gold)
    return {
        **relation_scores(gold, predicted),
        "majority_relation": {"label": majority, **relation_scores(gold, [majority] * len(gold))},
        "sessions": len(kept), "skipped": dict(skipped), "pairs": len(gold), "extractor_errors": errors,
        "labels": {label: n for label in PAIR_LABELS if (n := gold.count(label))},
        "predicted": {label: n for label in PAIR_LABELS if (n := predicted.count(label))},
        "seconds_per_session": round(seconds / len(kept), 3),
    }


#: The figures of a ``RelationEvaluator`` result early stopping can read.
RelationMetric = Literal["macro_f1", "macro_f1_relations", "accuracy"]


@dataclass
class RelationEvaluator(StageEvaluator[TeacherLabels]):
    """Pair labels against the prompted CompassMem relation extractor (the teacher) on every
    canonical event pair of the cached sessions (``evaluate_relation_extractor``)."""

    family: ClassVar[type] = RelationExtractor
    configs: ClassVar[dict[str, str]] = {"teacher": "teacher_overrides"}

    metric: RelationMetric = "macro_f1"
    teacher: PipelineConfig = TEACHER_CONFIG
    teacher_overrides: list[str] = field(default_factory=list)
    keep_failed: bool = False

    def prepare(self, conversations: Sequence[Conversation]) -> TeacherLabels:
        """The teacher's sessions; a ValueError when none has two events (and, unless
        ``keep_failed``, no failed call): no pair to score."""
        labels = teacher_labels(self, conversations)
        if not any(len(s.events) >= 2 and (self.keep_failed or not s.failed) for s in labels.sessions):
            raise ValueError(f"no cached teacher session for {[c.id for c in conversations]} ({dict(labels.counts)}; "
                             f"of {len(labels.sessions)} replayed, none has two events"
                             f"{'' if self.keep_failed else ' and no failed call'}): run the prompted build of "
                             f"{pipeline_label(self.teacher)} on them first")
        return labels

    def score(self, stage: Any, prepared: TeacherLabels) -> dict[str, Any]:
        return {**evaluate_relation_extractor(stage, prepared.sessions, self.keep_failed),
                "teacher": dict(prepared.counts), "keep_failed": self.keep_failed}

    def headline(self, result: dict[str, Any]) -> dict[str, tuple[float | None, int]]:
        return {k: (result[k], result["pairs"]) for k in ("accuracy", "macro_f1", "macro_f1_relations")}
