"""Evaluating one stage on its own, without an LLM: rerankers and routers.

What ``memlab evaluate-stage`` and the training recipes report.

* Rerankers (``reranker_candidates`` + ``evaluate_reranker``): per question of categories
  1-4 with gold evidence, the first-stage candidates are the turn units of the hybrid ranking
  exactly as ``configs/pipelines/rag_turns.yaml`` computes it (``TurnSegmenter`` units,
  ``UnitMemory.search_hybrid`` with its ``candidates`` and ``rrf_k``); the reranker re-scores
  all of them. Evidence recall@k (``memlab.eval.metrics.recall_at_k``: the share of distinct
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
from memlab.training.supervision import evaluable_questions, turn_units
from memlab.types import ANSWERABLE_CATEGORIES, Conversation, MemoryUnit

if TYPE_CHECKING:
    from memlab.embed.base import Embedder
    from memlab.stages.rerank import Reranker
    from memlab.stages.route import IntentRouter

#: The label a router's missing question type gets in the confusion matrix.
NO_TYPE = "none"
_BATCH = 32


# -- rerankers ----------------------------------------------------------------------------
def reranker_candidates(
    conversations: Sequence[Conversation],
    embedder: "Embedder",
    depth: int = 50,
    rrf_k: int = 10,
    candidates: int = 50,
    retrieval: str = "hybrid",
) -> list[dict[str, Any]]:
    """First-stage candidates per question (see the module docstring); one memory per conversation.

    Each item: ``question_id, conversation_id, question, category, evidence, candidates``
    (the top ``depth`` turn units, best first). ``retrieval="dense"`` ranks by the embedder alone.
    """
    from memlab.memory.store import UnitMemory

    if depth < 1:
        raise ValueError(f"depth must be positive, got {depth}")
    if retrieval not in ("hybrid", "dense"):
        raise ValueError(f"retrieval must be 'hybrid' or 'dense', got {retrieval!r}")
    items = []
    for conversation in conversations:
        questions = evaluable_questions(conversation)
        if not questions:
            continue
        memory = UnitMemory.build(turn_units(conversation), embedder)
        for question in questions:
            # As RAG.retrieve: each side contributes at least ``depth`` candidates.
            ranking = (memory.search_hybrid(question.text, k=depth, candidates=max(candidates, depth), rrf_k=rrf_k)
                       if retrieval == "hybrid" else memory.search_dense(question.text, k=depth))
            items.append({
                "question_id": question.id, "conversation_id": conversation.id, "question": question.text,
                "category": question.category, "evidence": tuple(question.evidence),
                "candidates": [r.unit for r in ranking],
            })
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


def _mean_recalls(rankings: Sequence[Sequence[MemoryUnit]], items: Sequence[dict[str, Any]], ks: Sequence[int]) -> dict:
    out = {}
    for k in ks:
        values = [recall_at_k([u.source_ids for u in ranking], item["evidence"], k) for ranking, item in zip(rankings, items)]
        values = [v for v in values if v is not None]
        out[f"recall@{k}"] = sum(values) / len(values) if values else None
    return out


def evaluate_reranker(
    reranker: "Reranker | None", items: Sequence[dict[str, Any]], ks: Sequence[int] = (1, 5, 10, 20)
) -> dict[str, Any]:
    """Mean evidence recall@k of the first-stage ranking and, with a reranker, of its re-ranking.

    ``{"first_stage": {"recall@k": ...}, "questions": n}``; with a reranker also ``"reranked":
    {"recall@k": ...}`` and ``rerank_seconds_per_question``.
    """
    if not items:
        raise ValueError("evaluate_reranker: no questions to evaluate (no items with evidence)")
    result: dict[str, Any] = {
        "first_stage": _mean_recalls([item["candidates"] for item in items], items, ks),
        "questions": len(items),
    }
    if reranker is not None:
        started = active_seconds()
        orders = rerank_order(reranker, items)
        result["rerank_seconds_per_question"] = (active_seconds() - started) / len(items)
        result["reranked"] = _mean_recalls(orders, items, ks)
    return result


# -- retrievers ---------------------------------------------------------------------------
def evaluate_retriever(
    embedder: "Embedder",
    conversations: Sequence[Conversation],
    retrieval: str = "hybrid",
    rrf_k: int = 10,
    candidates: int = 50,
    ks: Sequence[int] = (1, 5, 10, 20),
) -> dict[str, Any]:
    """Mean evidence recall@k of the turn-unit ranking with ``embedder`` (as ``rag_turns`` ranks:
    ``retrieval`` ``"hybrid"``, dense and BM25 fused by RRF, or ``"dense"``), over every question
    of categories 1-4 with evidence; ``{"recall@k": ..., "questions": n}``."""
    items = reranker_candidates(conversations, embedder, depth=max(ks), rrf_k=rrf_k, candidates=candidates,
                                retrieval=retrieval)
    if not items:
        raise ValueError("evaluate_retriever: no questions with evidence")
    return {**_mean_recalls([item["candidates"] for item in items], items, ks), "questions": len(items)}


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
