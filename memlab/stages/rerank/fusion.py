"""Keep the first stage's judgement: fuse its order with a reranker's order by reciprocal rank.

``RerankIn.candidates`` arrive in first-stage order. ``OrderFusionReranker`` scores each
candidate by reciprocal-rank fusion (constant ``rrf_k``) of that order and the order of an
inner reranker, so a trained reranker refines the first-stage ranking instead of replacing
it (a reranker trained on little data is confidently wrong on some questions the first
stage gets right; fusion keeps those).
"""

from __future__ import annotations

from memlab.bounds import NonNegativeFloat, NonNegativeInt
from memlab.memory.index import rrf_fuse
from memlab.stages.rerank.base import Reranker, RerankIn, RerankOut


class OrderFusionReranker(Reranker):
    def __init__(self, reranker: Reranker, rrf_k: NonNegativeInt = 10, weight: NonNegativeFloat = 1.0) -> None:
        super().__init__()
        self.reranker = reranker
        self.rrf_k = rrf_k
        self.weight = weight  # of the inner reranker's order; the first-stage order weighs 1

    def forward(self, batch: list[RerankIn]) -> list[RerankOut]:
        out = []
        for item, inner in zip(batch, self.reranker(batch)):
            ids = [str(i) for i in range(len(item.candidates))]
            reranked = [ids[i] for i in sorted(range(len(ids)), key=lambda i: -inner.scores[i])]
            fused = dict(rrf_fuse([ids, reranked], k=self.rrf_k, weights=[1.0, self.weight]))
            out.append(RerankOut(tuple(fused[i] for i in ids), error=inner.error))
        return out
