"""The traversal family (MAGMA's traverser): its targets, and its evaluator.

* **Targets** (``traversal_targets``): per question, the unit / graph-node ids whose provenance
  holds a gold evidence turn (``is_positive``): the nodes a traversal policy should reach, on a
  built MAGMA memory's event nodes (``magma_event_units``).
* **Evaluator** (``SlotRecallEvaluator``): evidence recall@k of a pipeline's retrieval with the
  stage in one of its slots (the traverser, or any other slot that does not change the build).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from memlab.config import Overrides, PipelineConfig
from memlab.stage import Stage
from memlab.training.evaluators import StageEvaluator, mean_recalls, pipeline_label
from memlab.training.supervision import evaluable_questions, is_positive
from memlab.types import Conversation, MemoryUnit, Question

if TYPE_CHECKING:
    from memlab.pipelines.magma.memory import MagmaMemory


def magma_event_units(memory: "MagmaMemory") -> list[MemoryUnit]:
    """The event nodes of a built MAGMA memory as units (their ``source_ids`` are the provenance)."""
    return [memory.unit(i) for i in memory.events()]


def traversal_targets(questions: Iterable[Question], units: Sequence[MemoryUnit]) -> list[dict[str, Any]]:
    """Per question, the ids of ``units`` whose ``source_ids`` hold a gold evidence turn.

    ``questions`` and ``units`` come from one conversation (evidence turn ids are only unique
    within one). Questions without evidence or without any target are skipped.
    """
    questions = list(questions)
    conversation_ids = sorted({q.conversation_id for q in questions})
    if len(conversation_ids) > 1:
        raise ValueError(f"traversal_targets takes one conversation's questions, got {conversation_ids}")
    out = []
    for question in questions:
        targets = [u.id for u in units if is_positive(u, question.evidence)]
        if targets:
            out.append({"question_id": question.id, "question": question.text,
                        "conversation_id": question.conversation_id, "targets": targets})
    return out


@dataclass(frozen=True)
class RetrievalPairs:
    """The pipeline whose slot is swapped, and each question with evidence beside its built memory."""

    pipeline: Any
    pairs: tuple[tuple[Any, Any], ...]


@dataclass
class SlotRecallEvaluator(StageEvaluator[RetrievalPairs]):
    """Evidence recall@k of a pipeline's retrieval with the stage in its ``slot`` (a dotted stage
    name, e.g. MAGMA's ``traverser``), over the questions with evidence (``evaluable_questions``); the
    memories are built once by ``pipeline`` (+ ``pipeline_overrides``), so the slot must not
    change what ``build`` makes. ``baseline`` adds the score of the slot's configured stage."""

    family: ClassVar[type] = Stage
    configs: ClassVar[dict[str, str]] = {"pipeline": "pipeline_overrides"}

    metric: str = "with_stage.recall@10"
    pipeline: PipelineConfig = "configs/pipelines/magma.yaml"
    pipeline_overrides: Overrides = field(default_factory=list)
    slot: str = "traverser"
    ks: list[int] = field(default_factory=lambda: [10])
    baseline: bool = True

    def prepare(self, conversations: Sequence[Conversation]) -> RetrievalPairs:
        pipeline = self.pipeline_named("pipeline")
        pairs = tuple((memory, q) for c in conversations for memory in [pipeline.build(c.history())]
                      for q in evaluable_questions(c))
        if not pairs:
            raise ValueError(f"{[c.id for c in conversations]}: no question with evidence to score (LoCoMo: categories 1-4)")
        return RetrievalPairs(pipeline, pairs)

    def recall(self, pipeline: Any, pairs: Sequence[tuple[Any, Any]]) -> dict[str, float | None]:
        rankings = [pipeline.retrieve(memory, question.as_query()) for memory, question in pairs]
        return mean_recalls([[r.unit for r in ranking] for ranking in rankings], [q.evidence for _, q in pairs], self.ks)

    def score(self, stage: Any, prepared: RetrievalPairs) -> dict[str, Any]:
        pipeline, pairs = prepared.pipeline, prepared.pairs
        result: dict[str, Any] = {"questions": len(pairs), "slot": self.slot, "pipeline": pipeline_label(self.pipeline)}
        if self.baseline:
            result["configured"] = self.recall(pipeline, pairs)
        old = pipeline.replace(self.slot, stage)
        try:
            result["with_stage"] = self.recall(pipeline, pairs)
        finally:
            if old is not None:
                pipeline.replace(self.slot, old)
        return result

    def headline(self, result: dict[str, Any]) -> dict[str, tuple[float | None, int]]:
        return {k: (v, result["questions"]) for k, v in result["with_stage"].items()}
