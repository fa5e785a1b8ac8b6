"""Scoring one stage on its own, without an LLM: rerankers and routers (the scores of
``memlab.training.evaluators.RerankerEvaluator`` and ``RouterEvaluator``).

* Rerankers (``evaluate_reranker``): per question of categories 1-4 with gold evidence, the
  first-stage candidates (an evaluator takes them from a pipeline's ranking) are re-scored
  by the reranker. Evidence recall@k (``memlab.eval.metrics.recall_at_k``: the share of distinct
  gold turns among the source ids of the top k) is averaged over questions, before and after.
* Routers (``evaluate_router``): question-type accuracy over categories 1-4 (4-way; a
  prediction of "adversarial" or of nothing is wrong there), 5-way accuracy over all
  questions, the confusion matrix and the time per question. A router only ever gets
  ``RouteIn(question)``: never the gold category.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from memlab.clock import active_seconds
from memlab.eval.metrics import recall_at_k
from memlab.types import ANSWERABLE_CATEGORIES, Conversation, MemoryUnit

if TYPE_CHECKING:
    from memlab.pipelines.base import Pipeline
    from memlab.stages.rerank import Reranker
    from memlab.stages.route import IntentRouter

#: The label a router's missing question type gets in the confusion matrix.
NO_TYPE = "none"
_BATCH = 32


# -- rerankers ----------------------------------------------------------------------------
def reranker_candidates(first_stage: "Pipeline", conversations: Sequence[Conversation], depth: int = 50
                        ) -> list[dict[str, Any]]:
    """Per question of categories 1-4 with evidence, the top ``depth`` units of ``first_stage``'s
    ranking (``build`` + ``retrieve_many``; configure it to rank at least ``depth`` deep, e.g.
    RAG's ``top_k=depth``, and without a reranker): ``question_id, conversation_id, question,
    category, evidence, candidates`` (best first)."""
    from memlab.training.supervision import evaluable_questions

    if depth < 1:
        raise ValueError(f"depth must be positive, got {depth}")
    items = []
    for conversation in conversations:
        questions = evaluable_questions(conversation)
        if not questions:
            continue
        memory = first_stage.build(conversation.history())
        for question, ranking in zip(questions, first_stage.retrieve_many(memory, [q.as_query() for q in questions])):
            items.append({"question_id": question.id, "conversation_id": conversation.id, "question": question.text,
                          "category": question.category, "evidence": tuple(question.evidence),
                          "candidates": [r.unit for r in ranking[:depth]]})
    return items


def rerank_order(reranker: "Reranker", items: Sequence[dict[str, Any]]) -> list[list[MemoryUnit]]:
    """Each item's candidates sorted by the reranker's scores (stable: ties keep the first-stage order)."""
    from memlab.stages.rerank import RerankIn

    orders = []
    for start in range(0, len(items), _BATCH):
        chunk = items[start:start + _BATCH]
        outputs = reranker([RerankIn(item["question"], tuple(u.text for u in item["candidates"])) for item in chunk])
        for item, out in zip(chunk, outputs):
            if len(out.scores) != len(item["candidates"]):
                raise ValueError(
                    f"question {item['question_id']}: the reranker gave {len(out.scores)} scores "
                    f"for {len(item['candidates'])} candidates"
                )
            ranked = sorted(zip(item["candidates"], out.scores), key=lambda pair: -float(pair[1]))
            orders.append([unit for unit, _ in ranked])
    return orders


def _recalls(rankings: Sequence[Sequence[MemoryUnit]], evidence: Sequence[Sequence[str]], k: int) -> list[float | None]:
    return [recall_at_k([u.source_ids for u in ranking], gold, k) for ranking, gold in zip(rankings, evidence)]


def mean_recalls(rankings: Sequence[Sequence[MemoryUnit]], evidence: Sequence[Sequence[str]],
                 ks: Sequence[int]) -> dict[str, float | None]:
    """Mean evidence recall@k of each ranking (units, best first) against its question's gold
    evidence turns, per k; None for a k no question has evidence to score."""
    out = {}
    for k in ks:
        values = [v for v in _recalls(rankings, evidence, k) if v is not None]
        out[f"recall@{k}"] = sum(values) / len(values) if values else None
    return out


def _paired_gain(first: Sequence[Sequence[MemoryUnit]], reranked: Sequence[Sequence[MemoryUnit]],
                 items: Sequence[dict[str, Any]], ks: Sequence[int]) -> dict[str, dict[str, Any]]:
    """Per k, the reranked minus the first-stage recall@k over the questions: mean, its 95%
    percentile-bootstrap interval (10,000 resamples of questions, seed 0) and n."""
    from memlab.eval.intervals import bootstrap_interval

    evidence = [item["evidence"] for item in items]
    out = {}
    for k in ks:
        pairs = [(a, b) for a, b in zip(_recalls(first, evidence, k), _recalls(reranked, evidence, k)) if a is not None]
        if pairs:
            differences = [b - a for a, b in pairs]
            out[f"recall@{k}"] = {"difference": sum(differences) / len(differences),
                                  "ci95": list(bootstrap_interval(differences)), "n": len(differences)}
    return out


def evaluate_reranker(
    reranker: "Reranker | None", items: Sequence[dict[str, Any]], ks: Sequence[int] = (1, 5, 10, 20)
) -> dict[str, Any]:
    """Mean evidence recall@k of the first-stage ranking and, with a reranker, of its re-ranking.

    ``{"first_stage": {"recall@k": ...}, "questions": n}``; with a reranker also ``"reranked":
    {"recall@k": ...}``, ``"gain"`` (reranked minus first stage per k, with its 95% bootstrap
    interval over questions and n) and ``rerank_seconds_per_question``.
    """
    if not items:
        raise ValueError("evaluate_reranker: no questions to evaluate (no items with evidence)")
    first = [item["candidates"] for item in items]
    evidence = [item["evidence"] for item in items]
    result: dict[str, Any] = {"first_stage": mean_recalls(first, evidence, ks), "questions": len(items)}
    if reranker is not None:
        started = active_seconds()
        orders = rerank_order(reranker, items)
        result["rerank_seconds_per_question"] = (active_seconds() - started) / len(items)
        result["reranked"] = mean_recalls(orders, evidence, ks)
        result["gain"] = _paired_gain(first, orders, items, ks)
    return result


# -- routers ------------------------------------------------------------------------------
def predict_question_types(router: "IntentRouter", questions: Sequence[str]) -> list[str]:
    """The router's question type per question (``NO_TYPE`` when it gives none).

    A classifier with ``predict(questions) -> [{"question_type": ...}, ...]`` (``QueryRouter``)
    is asked through it; any other router through ``forward`` on ``RouteIn(question)``.
    """
    from memlab.stages.route import RouteIn

    predictions: list[str] = []
    for start in range(0, len(questions), _BATCH):
        chunk = list(questions[start:start + _BATCH])
        if callable(getattr(router, "predict", None)):
            labels = [row.get("question_type") for row in router.predict(chunk)]
        else:
            labels = [out.question_type for out in router([RouteIn(text) for text in chunk])]
        if len(labels) != len(chunk):
            raise ValueError(f"the router gave {len(labels)} predictions for {len(chunk)} questions")
        predictions.extend(NO_TYPE if label is None else str(label) for label in labels)
    return predictions


def evaluate_router(router: "IntentRouter", conversations: Sequence[Conversation]) -> dict[str, Any]:
    """Question-type accuracy (4-way over categories 1-4, and 5-way), confusion matrix, speed."""
    questions = [q for conversation in conversations for q in conversation.questions]
    if not questions:
        raise ValueError("evaluate_router: the conversations have no questions")
    started = active_seconds()
    predicted = predict_question_types(router, [q.text for q in questions])
    seconds = active_seconds() - started
    confusion: dict[str, dict[str, int]] = {}
    for question, label in zip(questions, predicted):
        row = confusion.setdefault(question.category, {})
        row[label] = row.get(label, 0) + 1
    answerable = [(q, p) for q, p in zip(questions, predicted) if q.category in ANSWERABLE_CATEGORIES]
    return {
        "accuracy": sum(q.category == p for q, p in answerable) / len(answerable) if answerable else None,
        "accuracy_5way": sum(q.category == p for q, p in zip(questions, predicted)) / len(questions),
        "confusion": confusion,
        "questions": len(questions),
        "questions_4way": len(answerable),
        "seconds_per_question": seconds / len(questions),
    }
