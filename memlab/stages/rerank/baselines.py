"""Untrained rerank baselines over an injected embedder: cosine, and cosine fused with BM25."""

from __future__ import annotations

import numpy as np

from memlab.bounds import NonNegativeInt
from memlab.embed.base import Embedder
from memlab.memory.index import BM25Index, rrf_fuse
from memlab.stages.rerank.base import Reranker, RerankIn, RerankOut


def _cosines(embedder: Embedder, batch: list[RerankIn]) -> list[np.ndarray]:
    """Cosine of each candidate to its query (one encode call for the whole batch)."""
    texts = [item.query for item in batch] + [c for item in batch for c in item.candidates]
    vectors = embedder.encode(texts)  # rows are L2-normalised
    queries, candidates = vectors[: len(batch)], vectors[len(batch):]
    out, start = [], 0
    for i, item in enumerate(batch):
        rows = candidates[start:start + len(item.candidates)]
        out.append(rows @ queries[i])
        start += len(item.candidates)
    return out


class CosineReranker(Reranker):
    """Score = cosine similarity between the query and candidate embeddings."""

    def __init__(self, embedder: Embedder) -> None:
        super().__init__()
        self.embedder = embedder

    def forward(self, batch: list[RerankIn]) -> list[RerankOut]:
        return [RerankOut(tuple(float(s) for s in scores)) for scores in _cosines(self.embedder, batch)]


class FusionReranker(Reranker):
    """Reciprocal-rank fusion of the BM25 rank and the cosine rank within each candidate list.

    BM25 is computed over the candidate list alone (its IDF is the list's), so the lexical
    signal needs no index. A candidate with no query word gets nothing from BM25.
    ``rrf_k`` is small by default because candidate lists are short.
    """

    def __init__(self, embedder: Embedder, rrf_k: NonNegativeInt = 10) -> None:
        super().__init__()
        self.embedder = embedder
        self.rrf_k = rrf_k

    def forward(self, batch: list[RerankIn]) -> list[RerankOut]:
        out = []
        for item, cosines in zip(batch, _cosines(self.embedder, batch)):
            ids = [str(i) for i in range(len(item.candidates))]
            lexical = [name for name, _ in BM25Index().build(ids, list(item.candidates)).search(item.query, len(ids))]
            semantic = [ids[i] for i in np.argsort(-cosines, kind="stable")]
            fused = dict(rrf_fuse([lexical, semantic], k=self.rrf_k))
            out.append(RerankOut(tuple(fused[name] for name in ids)))
        return out
