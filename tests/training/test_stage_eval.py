"""Stage evaluation: reranker recall before/after re-ranking, router accuracy and confusion."""

from __future__ import annotations

import pytest

from memlab.data import load_sample
from memlab.eval.metrics import recall_at_k
from memlab.memory.store import UnitMemory
from memlab.pipelines.rag import RAG
from memlab.stages.answer import PromptedAnswerer
from memlab.stages.rerank import Reranker, RerankOut
from memlab.stages.route import IntentRouter, RouteOut
from memlab.stages.route.rules import RuleRouter
from memlab.stages.segment import SegmentIn, TurnSegmenter
from memlab.training.rerank import evaluate_reranker, reranker_candidates
from memlab.training.route import evaluate_router
from tests.fakes import ReplayLM
from tests.memory.helpers import HashingEmbedder


def rag_turns(top_k: int, candidates: int = 50, rrf_k: int = 10) -> RAG:
    """rag_turns' first stage (turn units, hybrid RRF) over the hashing embedder, ranking ``top_k`` deep."""
    return RAG(segmenter=TurnSegmenter(), embedder=HashingEmbedder(), retrieval="hybrid", top_k=top_k,
               candidates=candidates, rrf_k=rrf_k, answerer=PromptedAnswerer(lm=ReplayLM(lambda r: "unused")))


def turn_units(conversation):
    """The turn units a pipeline builds from the conversation's history (under its opaque id)."""
    history = conversation.history()
    outputs = TurnSegmenter()([SegmentIn(history.id, session) for session in history.sessions])
    return [unit for out in outputs for unit in out.units]


@pytest.fixture(scope="module")
def sample():
    return load_sample()


@pytest.fixture(scope="module")
def items(sample):
    # depth 80 = every turn of the sample, so every evidence turn is a candidate.
    return reranker_candidates(rag_turns(top_k=80), sample, depth=80)


# -- rerankers ----------------------------------------------------------------------------
def test_candidates_are_the_rag_turns_hybrid_ranking(sample):
    items = reranker_candidates(rag_turns(top_k=30, candidates=50, rrf_k=10), sample, depth=30)
    answerable = [q for q in sample[0].questions if q.category != "adversarial" and q.evidence]
    assert [i["question_id"] for i in items] == [q.id for q in answerable]
    memory = UnitMemory.build(turn_units(sample[0]), HashingEmbedder())
    for item, question in zip(items, answerable):
        expected = memory.search_hybrid(question.text, k=30, candidates=50, rrf_k=10)
        assert [u.id for u in item["candidates"]] == [r.unit.id for r in expected]
        assert item["evidence"] == question.evidence and item["category"] == question.category


class EvidenceFirst(Reranker):
    """Test-only oracle: scores 1 for candidate texts known to hold evidence for the query."""

    def __init__(self, relevant: dict[str, list[str]]) -> None:
        super().__init__()
        self.relevant = relevant

    def forward(self, batch):
        return [RerankOut(tuple(float(c in self.relevant[i.query]) for c in i.candidates)) for i in batch]


class Reversed(Reranker):
    def forward(self, batch):
        return [RerankOut(tuple(float(-n) for n in range(len(i.candidates)))[::-1]) for i in batch]


def test_an_evidence_first_reranker_gets_full_recall(items):
    relevant = {
        item["question"]: [u.text for u in item["candidates"] if set(u.source_ids) & set(item["evidence"])]
        for item in items
    }
    result = evaluate_reranker(EvidenceFirst(relevant), items)
    assert result["questions"] == 19
    for k in (5, 10, 20):
        assert result["reranked"][f"recall@{k}"] == 1.0  # at most 3 evidence turns per question
    assert result["reranked"]["recall@1"] >= result["first_stage"]["recall@1"]
    assert result["first_stage"]["recall@5"] < 1.0  # the hashing first stage is not perfect
    assert result["rerank_seconds_per_question"] >= 0


def test_first_stage_recall_matches_the_metric_and_needs_no_reranker(items):
    alone = evaluate_reranker(None, items, ks=(1, 10))
    assert set(alone) == {"first_stage", "questions"}
    expected = sum(recall_at_k([u.source_ids for u in i["candidates"]], i["evidence"], 10) for i in items) / len(items)
    assert alone["first_stage"]["recall@10"] == pytest.approx(expected)
    reversed_ = evaluate_reranker(Reversed(), items, ks=(1, 10))
    assert reversed_["first_stage"] == alone["first_stage"]
    assert reversed_["reranked"]["recall@10"] != alone["first_stage"]["recall@10"]
    with pytest.raises(ValueError, match="no questions"):
        evaluate_reranker(None, [])


# -- routers ------------------------------------------------------------------------------
def test_rule_router_evaluation_keys_and_bounds(sample):
    result = evaluate_router(RuleRouter(), sample)
    assert set(result) >= {"accuracy", "accuracy_5way", "confusion", "questions", "seconds_per_question"}
    assert result["questions"] == 23 and result["questions_4way"] == 19
    assert 0.0 <= result["accuracy_5way"] <= result["accuracy"] <= 1.0  # it never predicts "adversarial"
    assert sum(sum(row.values()) for row in result["confusion"].values()) == 23
    assert sum(result["confusion"]["adversarial"].values()) == 4
    correct = sum(row.get(gold, 0) for gold, row in result["confusion"].items() if gold != "adversarial")
    assert result["accuracy"] == pytest.approx(correct / 19)
    assert result["seconds_per_question"] >= 0


class AlwaysTemporal(IntentRouter):
    """Records what it is given; predicts "temporal" for everything, or nothing."""

    def __init__(self, question_type: str | None = "temporal") -> None:
        super().__init__()
        self.question_type = question_type
        self.seen = []

    def forward(self, batch):
        self.seen.extend(batch)
        return [RouteOut(intent="ENTITY", question_type=self.question_type) for _ in batch]


class PredictingRouter(IntentRouter):
    """A classifier-style router: ``predict`` gives the 5-way label."""

    def predict(self, questions):
        return [{"question_type": "adversarial"} for _ in questions]

    def forward(self, batch):  # pragma: no cover - evaluate_router uses predict
        raise AssertionError("predict should be used")


def test_router_accuracy_counts_and_inputs(sample):
    router = AlwaysTemporal()
    result = evaluate_router(router, sample)
    assert result["accuracy"] == pytest.approx(7 / 19)
    assert result["accuracy_5way"] == pytest.approx(7 / 23)
    assert result["confusion"]["temporal"] == {"temporal": 7}
    assert all(item.reference is None for item in router.seen)
    assert [item.question for item in router.seen] == [q.text for q in sample[0].questions]

    none = evaluate_router(AlwaysTemporal(question_type=None), sample)
    assert none["accuracy"] == 0.0 and none["confusion"]["single-hop"] == {"none": 5}

    adversarial = evaluate_router(PredictingRouter(), sample)
    assert adversarial["accuracy"] == 0.0  # "adversarial" is wrong on categories 1-4
    assert adversarial["accuracy_5way"] == pytest.approx(4 / 23)
