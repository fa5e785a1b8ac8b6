"""The reranking family: a reranker's supervision, how it is scored, and its evaluator.

* **Supervision** (``rerank_examples``): (question, unit text, label); label 1 when the unit's
  ``source_ids`` hold a gold evidence turn (``is_positive``). Units and rankings are a
  first-stage pipeline's (its memory of the conversation, built by ``build``: ``rag_turns``'
  turn units, or any pipeline's units); negatives come from its BM25 and dense rankings.
* **Scores** (``evaluate_reranker``): per question of categories 1-4 with gold evidence, the
  first-stage candidates (``reranker_candidates``: a pipeline's ranking) are re-scored by the
  reranker. Evidence recall@k (``memlab.eval.metrics.recall_at_k``: the share of distinct gold
  turns among the source ids of the top k) is averaged over questions, before and after.
* **Evaluator** (``RerankerEvaluator``): the two above as a ``StageEvaluator``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import datasets

from memlab.bounds import PositiveInt
from memlab.clock import active_seconds
from memlab.config import Overrides, PipelineConfig
from memlab.data.prefix import first_questions
from memlab.stages.rerank import Reranker
from memlab.training.evaluators import (
    SCORING_BATCH,
    StageEvaluator,
    first_stage_adjustment,
    mean_recalls,
    pipeline_label,
    question_recalls,
)
from memlab.training.supervision import dataset_with_card, evaluable_questions, is_positive
from memlab.types import ANSWERABLE_CATEGORIES, LOCOMO_CATEGORIES, Conversation, MemoryUnit

if TYPE_CHECKING:
    from memlab.pipelines.base import Pipeline



# -- supervision ---------------------------------------------------------------------------
RERANK_FEATURES = datasets.Features(
    {
        "conversation_id": datasets.Value("string"),
        "question_id": datasets.Value("string"),
        "question": datasets.Value("string"),
        "unit_id": datasets.Value("string"),
        "text": datasets.Value("string"),
        "label": datasets.Value("int64"),
        "source": datasets.Value("string"),
        "rank": datasets.Value("int64"),
    }
)


def rerank_examples(
    conversations: Sequence[Conversation],
    first_stage: "Pipeline",
    negatives: int = 8,
    candidates: int = 50,
    categories: Sequence[str] = ANSWERABLE_CATEGORIES,
    seed: int = 0,
    sampling: str = "top",
) -> datasets.Dataset:
    """Labelled (question, unit) pairs for a reranker (see the module docstring).

    ``first_stage`` is the pipeline whose ranking the reranker re-scores (``rag_turns.yaml``,
    ``rag_turns_gemma.yaml``, any pipeline whose ``build`` gives a ``UnitMemory`` and that has
    ``retrieval`` and ``rrf_k``): its memory of each conversation gives the units, and its
    dense and BM25 indexes the rankings. Per question of ``categories`` with gold evidence:
    every positive unit (``source="positive"``, ``rank`` = its rank in the first stage's
    ranking, the top ``candidates`` of its fusion of the ``candidates`` per side
    (``UnitMemory.search_hybrid``), -1 when outside it), then up to
    ``negatives`` hard negatives, half from BM25 and half from dense (``rank`` = rank in that
    ranking), best ranks first, a unit taken once. With an odd ``negatives`` the side getting
    the extra one is drawn from ``seed`` and the question id; a side that runs out is topped up
    from the other. Questions without a positive unit are skipped and counted in the card.

    ``sampling="uniform"`` draws each side's negatives at random (seeded per question) from its
    top ``candidates`` instead of taking the best-ranked: a reranker that re-scores the whole
    first-stage list must also see the weaker candidates it will meet there, not only the
    hardest ones (trained on the hardest alone, it learns to prefer weak, unrelated units).

    A first stage with ``retrieval="dense"`` (``rag_turns_gemma.yaml``) ranks by the embedder
    alone, so every negative comes from its ranking and a positive's ``rank`` is its rank there.
    """
    retrieval, rrf_k = getattr(first_stage, "retrieval", None), getattr(first_stage, "rrf_k", None)
    if sampling not in ("top", "uniform"):
        raise ValueError(f"sampling must be 'top' or 'uniform', got {sampling!r}")
    if retrieval not in ("hybrid", "dense"):
        raise ValueError(f"the first stage's retrieval must be 'hybrid' or 'dense', got {retrieval!r}")
    if negatives < 0 or candidates < 1:
        raise ValueError(f"need negatives >= 0 and candidates >= 1, got {negatives} and {candidates}")
    unknown = sorted(set(categories) - set(LOCOMO_CATEGORIES.values()))
    if unknown:
        raise ValueError(f"unknown categories {unknown}; LoCoMo has {list(LOCOMO_CATEGORIES.values())}")
    rows: list[dict[str, Any]] = []
    counts = {"questions": 0, "no_evidence": 0, "no_positive_unit": 0, "positives": 0, "negatives": 0}
    for conversation in conversations:
        memory = first_stage.build(conversation.history())
        conversation_units = list(memory.units.values())
        if not conversation_units:
            raise ValueError(f"conversation {conversation.id}: the first stage built a memory without units")
        questions = evaluable_questions(conversation, categories)
        counts["no_evidence"] += sum(q.category in categories for q in conversation.questions) - len(questions)
        for question in questions:
            positives = [u for u in conversation_units if is_positive(u, question.evidence)]
            if not positives:
                counts["no_positive_unit"] += 1
                continue
            counts["questions"] += 1
            dense = [r.unit.id for r in memory.search_dense(question.text, k=candidates)]
            bm25 = [r.unit.id for r in memory.search_bm25(question.text, k=candidates)] if retrieval == "hybrid" else []
            ranking = dense if retrieval == "dense" else [  # the first stage's own fusion of the two
                r.unit.id for r in memory.search_hybrid(question.text, k=candidates, candidates=candidates, rrf_k=rrf_k)]
            positive_ids = {u.id for u in positives}

            def row(unit: MemoryUnit, label: int, source: str, rank: int) -> dict[str, Any]:
                return {
                    "conversation_id": conversation.id, "question_id": question.id, "question": question.text,
                    "unit_id": unit.id, "text": unit.text, "label": label, "source": source, "rank": rank,
                }

            for unit in positives:
                rows.append(row(unit, 1, "positive", ranking.index(unit.id) if unit.id in ranking else -1))
            rng = random.Random(f"{seed}:{question.id}")
            pools = {"bm25": [i for i in bm25 if i not in positive_ids], "dense": [i for i in dense if i not in positive_ids]}
            extra_to = rng.choice(["bm25", "dense"])  # drawn either way: hybrid rows stay as they were
            if sampling == "uniform":
                for pool in pools.values():
                    rng.shuffle(pool)
            picked = _pick_negatives(pools, negatives, extra_to=extra_to)
            for unit_id, source in picked:
                rank = (bm25 if source == "bm25" else dense).index(unit_id)
                rows.append(row(memory.get(unit_id), 0, source, rank))
            counts["positives"] += len(positives)
            counts["negatives"] += len(picked)
    sides = "BM25 and dense rankings" if retrieval == "hybrid" else "dense ranking"
    card = f"""memlab reranking supervision (memlab.training.rerank.rerank_examples).
Rows: one (question, memory unit) pair; label 1 when the unit's source_ids contain a gold evidence turn id, else 0.
Units: the memory of the first stage, {type(first_stage).__name__}.
First stage: {retrieval} ({"dense and BM25 fused by RRF" if retrieval == "hybrid" else "the embedder's ranking alone"}).
Positives: every unit holding gold evidence (source "positive", rank = rank in the first stage's top {candidates}, -1 if outside).
Negatives: up to {negatives} per question, non-positive units of the {sides} (top {candidates} each,
split evenly, odd one by seed={seed}) of a UnitMemory over the same units (rrf_k={rrf_k}); sampling={sampling!r}
("top": the best-ranked, hardest ones; "uniform": drawn at random within the top {candidates}).
Categories: {list(categories)}. Conversations: {[c.id for c in conversations]}.
Questions used: {counts["questions"]}; skipped without evidence: {counts["no_evidence"]}; skipped with no positive unit: {counts["no_positive_unit"]}.
Rows: {counts["positives"]} positive, {counts["negatives"]} negative."""
    return dataset_with_card(rows, RERANK_FEATURES, card)


def _pick_negatives(rankings: dict[str, list[str]], n: int, extra_to: str) -> list[tuple[str, str]]:
    """Up to ``n`` distinct ids, best first from each ranking, ``n // 2`` per side plus the odd one."""
    other = "dense" if extra_to == "bm25" else "bm25"
    quota = {extra_to: n - n // 2, other: n // 2}
    picked: dict[str, str] = {}
    for source in (extra_to, other):
        for unit_id in rankings[source]:
            if sum(1 for s in picked.values() if s == source) >= quota[source]:
                break
            picked.setdefault(unit_id, source)
    for source in (extra_to, other):  # top up from either side when one ran short
        for unit_id in rankings[source]:
            if len(picked) >= n:
                break
            picked.setdefault(unit_id, source)
    return list(picked.items())


# -- scores --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Candidates:
    """Per question with evidence, the first stage's top units (``reranker_candidates``' items:
    ``question_id, conversation_id, question, category, evidence, candidates``)."""

    items: tuple[dict[str, Any], ...]

    def __len__(self) -> int:
        return len(self.items)

    def first(self, n: int | None) -> Candidates:
        """The first ``n`` questions (all of them with None)."""
        return self if n is None else Candidates(self.items[:n])


def reranker_candidates(first_stage: "Pipeline", conversations: Sequence[Conversation], depth: int = 50
                        ) -> list[dict[str, Any]]:
    """Per question of categories 1-4 with evidence, the top ``depth`` units of ``first_stage``'s
    ranking (``build`` + ``retrieve_many``; configure it to rank at least ``depth`` deep, e.g.
    RAG's ``top_k=depth``, and without a reranker): ``question_id, conversation_id, question,
    category, evidence, candidates`` (best first)."""
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
    for start in range(0, len(items), SCORING_BATCH):
        chunk = items[start:start + SCORING_BATCH]
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


def _paired_gain(first: Sequence[Sequence[MemoryUnit]], reranked: Sequence[Sequence[MemoryUnit]],
                 items: Sequence[dict[str, Any]], ks: Sequence[int]) -> dict[str, dict[str, Any]]:
    """Per k, the reranked minus the first-stage recall@k over the questions: mean, its 95%
    percentile-bootstrap interval (10,000 resamples of questions, seed 0) and n."""
    from memlab.eval.intervals import bootstrap_interval

    evidence = [item["evidence"] for item in items]
    out = {}
    for k in ks:
        pairs = [(a, b) for a, b in zip(question_recalls(first, evidence, k), question_recalls(reranked, evidence, k)) if a is not None]
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


# -- evaluator -----------------------------------------------------------------------------
@dataclass
class RerankerEvaluator(StageEvaluator[Candidates]):
    """Evidence recall@k of a reranker over a first stage's top ``depth`` (``evaluate_reranker``).

    The first stage is the pipeline of ``pipeline`` (+ ``pipeline_overrides``) without its
    reranker and with ``top_k=depth``: its memory of each conversation and its ranking of each
    question with evidence (``evaluable_questions``). ``rag_turns.yaml`` is MiniLM + BM25 fused by RRF;
    ``rag_turns_gemma.yaml`` EmbeddingGemma's dense ranking. ``max_questions`` keeps the first
    questions of each conversation only (a prompted reranker costs a call a question). Scoring
    no stage (None) gives the first stage's own order.
    """

    family: ClassVar[type] = Reranker
    configs: ClassVar[dict[str, str]] = {"pipeline": "pipeline_overrides"}

    metric: str = "reranked.recall@10"
    pipeline: PipelineConfig = "configs/pipelines/rag_turns.yaml"
    pipeline_overrides: Overrides = field(default_factory=list)
    depth: PositiveInt = 50
    ks: list[int] = field(default_factory=lambda: [1, 5, 10, 20])
    max_questions: PositiveInt | None = None

    def first_stage(self) -> Any:
        """The first stage: the pipeline without its reranker, ranking ``depth`` deep (built once)."""
        return self.pipeline_named("pipeline", first_stage_adjustment(self.depth))

    def prepare(self, conversations: Sequence[Conversation]) -> Candidates:
        """Per question the first stage's top ``depth`` units, best first."""
        return Candidates(tuple(reranker_candidates(self.first_stage(), first_questions(conversations, self.max_questions),
                                                    self.depth)))

    def score(self, stage: Any, prepared: Candidates) -> dict[str, Any]:
        return {**evaluate_reranker(stage, prepared.items, ks=tuple(self.ks)),
                "first_stage_pipeline": pipeline_label(self.pipeline)}

    def headline(self, result: dict[str, Any]) -> dict[str, tuple[float | None, int]]:
        ranking = result.get("reranked", result["first_stage"])  # no stage: the first stage's order
        return {k: (v, result["questions"]) for k, v in ranking.items()}
