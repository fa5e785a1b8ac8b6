"""Retrieval-augmented generation over memory units: the baselines memory papers compare to.

``configs/pipelines/rag.yaml`` is the CompassMem paper's RAG baseline (512-token chunks, dense
top-5); ``rag_turns.yaml`` indexes one unit per turn and fuses dense and BM25 rankings.
"""

from __future__ import annotations

from typing import Literal

from memlab.bounds import NonNegativeInt, PositiveInt
from memlab.embed.base import Embedder
from memlab.memory.store import UnitMemory
from memlab.pipelines.base import RECALL_DEPTH, Pipeline, render_units
from memlab.pipelines.context_budget import answer_budget, fit_units
from memlab.stages.answer import Answerer, AnswerIn
from memlab.stages.rerank import Reranker, RerankIn
from memlab.stages.segment import Segmenter, SegmentIn
from memlab.types import Answer, History, Query, Retrieved, Trace

RETRIEVAL_MODES = ("dense", "bm25", "hybrid")


class RAG(Pipeline):
    """Segment sessions into units, index them, retrieve ``top_k`` for the answerer.

    ``retrieval``: ``dense`` (embedder + faiss), ``bm25``, or ``hybrid`` (both, fused by
    reciprocal-rank fusion over ``candidates`` from each side, constant ``rrf_k``). An optional
    ``reranker`` re-scores the first ``rerank_depth`` units of the ranking. The answerer reads
    the first ``top_k`` units, fewer when they do not fit the context budget
    (``memlab.pipelines.context_budget``: ``max_context_tokens``, else the answering model's
    window less ``reserve_tokens``).
    """

    query_settings = ("answerer", "retrieval", "top_k", "candidates", "rrf_k", "reranker", "rerank_depth",
                      "max_context_tokens", "reserve_tokens")

    def __init__(
        self,
        segmenter: Segmenter,
        embedder: Embedder,
        answerer: Answerer,
        retrieval: Literal["dense", "bm25", "hybrid"] = "dense",
        top_k: PositiveInt = 5,
        candidates: PositiveInt = 50,
        rrf_k: NonNegativeInt = 60,
        reranker: Reranker | None = None,
        rerank_depth: PositiveInt = 30,
        max_context_tokens: PositiveInt | None = None,
        reserve_tokens: NonNegativeInt = 512,
    ) -> None:
        super().__init__()
        self.segmenter = segmenter
        self.embedder = embedder
        self.answerer = answerer
        self.reranker = reranker
        self.retrieval = retrieval
        self.top_k = top_k
        self.candidates = candidates
        self.rrf_k = rrf_k
        self.rerank_depth = rerank_depth
        self.max_context_tokens = max_context_tokens
        self.reserve_tokens = reserve_tokens

    def load_memory(self, folder):
        return UnitMemory.load(folder, self.embedder)

    def build(self, history: History) -> UnitMemory:
        outputs = self.segmenter([SegmentIn(history.id, session) for session in history.sessions])
        units = [unit for out in outputs for unit in out.units]
        return UnitMemory.build(units, self.embedder)

    def first_stage(self, memory: UnitMemory, query: Query) -> list[Retrieved]:
        depth = max(self.top_k, RECALL_DEPTH, self.rerank_depth if self.reranker is not None else 0)
        if self.retrieval == "dense":
            return memory.search_dense(query.text, k=depth)
        if self.retrieval == "bm25":
            return memory.search_bm25(query.text, k=depth)
        return memory.search_hybrid(query.text, k=depth, candidates=max(self.candidates, depth), rrf_k=self.rrf_k)

    def retrieve_many(self, memory: UnitMemory, queries: list[Query]) -> list[list[Retrieved]]:
        rankings = [self.first_stage(memory, query) for query in queries]
        reranked = [i for i, ranking in enumerate(rankings) if ranking] if self.reranker is not None else []
        if reranked:  # one reranker call for the batch
            heads = [rankings[i][: self.rerank_depth] for i in reranked]
            outputs = self.reranker([RerankIn(queries[i].text, tuple(r.unit.text for r in head))
                                     for i, head in zip(reranked, heads)])
            for i, head, out in zip(reranked, heads, outputs):
                head = [Retrieved(r.unit, float(s)) for r, s in sorted(zip(head, out.scores), key=lambda p: -p[1])]
                rankings[i] = head + rankings[i][self.rerank_depth:]
        return rankings

    def retrieve(self, memory: UnitMemory, query: Query) -> list[Retrieved]:
        return self.retrieve_many(memory, [query])[0]

    def answer_many(self, memory: UnitMemory, queries: list[Query]) -> list[Answer]:
        rankings = self.retrieve_many(memory, queries)
        count, budget = answer_budget(self.answerer, self.max_context_tokens, self.reserve_tokens)
        shown = [fit_units([r.unit for r in ranking[: self.top_k]], count, budget) for ranking in rankings]
        contexts = [render_units(units) for units in shown]
        outputs = self.answerer([AnswerIn(q.text, context, q.timestamp) for q, context in zip(queries, contexts)])
        answers = []
        for ranking, units, context, out in zip(rankings, shown, contexts, outputs):
            trace = Trace()
            trace.add("retrieve", mode=self.retrieval, units=[u.id for u in units],
                      over_budget=len(ranking[: self.top_k]) - len(units), budget=budget)
            trace.add("answer", text=out.text, error=out.error)
            answers.append(Answer(text=out.text, retrieved=ranking, context=context, shown=len(units),
                                  error=out.error, trace=trace))
        return answers

    def answer(self, memory: UnitMemory, query: Query) -> Answer:
        return self.answer_many(memory, [query])[0]
