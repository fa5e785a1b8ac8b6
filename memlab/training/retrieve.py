"""The retrieval family (a trainable embedder): its evaluator. Its training pairs are the
reranking family's (``memlab.training.rerank.rerank_examples``): the same labelled units.

``RetrieverEvaluator`` scores evidence recall@k of a pipeline with the trained embedder in its
``embedder`` slot, each conversation's memory built with the stage's vectors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from memlab.config import Overrides, PipelineConfig, load_config
from memlab.stages.retrieve import TrainableEmbedder
from memlab.training.evaluators import StageEvaluator, first_stage_adjustment, mean_recalls, pipeline_label
from memlab.training.supervision import evaluable_questions
from memlab.types import Conversation


@dataclass(frozen=True)
class PipelineTree:
    """A validated pipeline tree (its embedder to be replaced) and the conversations to build."""

    tree: Mapping[str, Any]
    conversations: tuple[Conversation, ...]


@dataclass
class RetrieverEvaluator(StageEvaluator[PipelineTree]):
    """Evidence recall@k of a trained embedder as the ``embedder`` of ``pipeline`` (+
    ``pipeline_overrides``): each conversation's memory built and each question of categories
    1-4 with evidence ranked with the stage's vectors."""

    family: ClassVar[type] = TrainableEmbedder
    configs: ClassVar[dict[str, str]] = {"pipeline": "pipeline_overrides"}
    metric: str = "recall@10"
    pipeline: PipelineConfig = "configs/pipelines/rag_turns.yaml"
    pipeline_overrides: Overrides = field(default_factory=list)
    ks: list[int] = field(default_factory=lambda: [1, 5, 10, 20])

    def first_stage(self) -> Any:
        """The pipeline without its reranker (built once): where the retriever's hard negatives come from."""
        return self.pipeline_named("pipeline", first_stage_adjustment(None))

    def prepare(self, conversations: Sequence[Conversation]) -> PipelineTree:
        from memlab.config import COMPONENT, ConfigError, split_runner_keys, validate

        tree = split_runner_keys(load_config(self.pipeline, self.pipeline_overrides))[0]
        if "embedder" not in tree or COMPONENT not in tree:
            raise ConfigError(f"{pipeline_label(self.pipeline)}: a RetrieverEvaluator needs a pipeline with an embedder")
        validate(tree)
        return PipelineTree(tree, tuple(conversations))

    def score(self, stage: Any, prepared: PipelineTree) -> dict[str, Any]:
        from memlab.config import instantiate
        pipeline = instantiate({**prepared.tree, "embedder": stage})
        rankings, questions = [], []
        for conversation in prepared.conversations:
            asked = evaluable_questions(conversation)
            if asked:
                memory = pipeline.build(conversation.history())
                rankings += pipeline.retrieve_many(memory, [q.as_query() for q in asked])
                questions += asked
        if not questions:
            raise ValueError(f"{[c.id for c in prepared.conversations]}: no question with evidence to score "
                             "(LoCoMo: categories 1-4)")
        units = [[r.unit for r in ranking] for ranking in rankings]
        return {**mean_recalls(units, [q.evidence for q in questions], self.ks), "questions": len(questions)}

    def headline(self, result: dict[str, Any]) -> dict[str, tuple[float | None, int]]:
        return {k: (v, result["questions"]) for k, v in result.items() if k.startswith("recall@")}
