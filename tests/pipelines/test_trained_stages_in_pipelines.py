"""Committed checkpoints loaded by configuration alone plug into pipelines and run."""

from pathlib import Path

import pytest

from memlab.config import build_pipeline
from memlab.data import load_sample
from memlab.stages.rerank import CrossEncoderReranker

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_rag_turns_with_the_trained_reranker_retrieves(monkeypatch):
    monkeypatch.chdir(REPO)
    plain, _, _ = build_pipeline(REPO / "configs/pipelines/rag_turns.yaml")
    reranked, _, _ = build_pipeline(REPO / "configs/pipelines/rag_turns_reranked.yaml")
    assert isinstance(reranked.reranker.reranker, CrossEncoderReranker)
    sample = load_sample()[0]
    questions = [q for q in sample.questions if q.evidence][:4]
    memory = plain.build(sample.history())
    reordered = 0
    for question in questions:
        hybrid = [r.unit.id for r in memory.search_hybrid(question.text, k=50, candidates=50, rrf_k=plain.rrf_k)]
        second = [r.unit.id for r in reranked.retrieve(memory, question.as_query())[:50]]
        assert set(second) == set(hybrid)  # the reranker re-orders the hybrid top 50, nothing else
        reordered += second != hybrid
    assert reordered


@pytest.mark.slow
def test_magma_with_the_trained_router_and_policy_retrieves(monkeypatch):
    monkeypatch.chdir(REPO)
    pipeline, _, _ = build_pipeline(REPO / "configs/pipelines/magma.yaml", [
        "event_extractor=null", "consolidator=null",
        "router._component_=memlab.stage.load_stage", "router.path=checkpoints/router-minilm",
        "traverser._component_=memlab.stage.load_stage", "traverser.path=checkpoints/traversal-policy",
    ])
    assert type(pipeline.router).__name__ == "QueryRouter" and pipeline.traverser.lambda2.item() > 1.0
    sample = load_sample()[0]
    memory = pipeline.build(sample.history())
    question = next(q for q in sample.questions if q.evidence)
    ranking = pipeline.retrieve(memory, question.as_query())
    assert len(ranking) >= 10 and all(r.unit.source_ids for r in ranking)
