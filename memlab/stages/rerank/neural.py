"""Cross-encoder reranker: a ``TextEncoder`` reads (query, candidate) together; a linear head gives one logit."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from memlab.bounds import PositiveInt
from memlab.stages.encoder import EncoderStage, TextEncoder
from memlab.stages.rerank.base import Reranker, RerankIn, RerankOut


class CrossEncoderReranker(EncoderStage, Reranker):
    """Relevance logit per (query, candidate) pair, higher is more relevant.

    The ``encoder`` reads each pair as two segments; what of it trains (a LoRA adapter, all
    of it) is the encoder's setting. Weights load on first use (see ``memlab.stages.encoder``).

    Training API: ``score_pairs`` (differentiable logits) and ``loss`` (binary cross-entropy
    with logits against 0/1 relevance labels).
    """

    def __init__(
        self,
        encoder: TextEncoder,
        batch_size: PositiveInt = 32,
        device: str = "cpu",
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.batch_size = batch_size
        self.device = device
        self.head: nn.Linear | None = None

    def _build_heads(self, hidden_size: int) -> None:
        self.head = nn.Linear(hidden_size, 1)

    def score_pairs(self, queries: list[str], texts: list[str]) -> torch.Tensor:
        """Logits ``[n]`` for the pairs ``(queries[i], texts[i])``; differentiable."""
        if len(queries) != len(texts):
            raise ValueError(f"score_pairs: {len(queries)} queries for {len(texts)} texts")
        if not queries:
            return torch.zeros(0, device=self.device)
        self.warm_up()
        pooled = self.encoder.pool(self.encoder.tokenize(list(queries), list(texts)))
        return self.head(pooled).squeeze(-1)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Binary cross-entropy with logits; ``labels`` are 0/1 (or soft) relevance targets."""
        if logits.shape != labels.shape:
            raise ValueError(f"loss: logits {tuple(logits.shape)} vs labels {tuple(labels.shape)}")
        return F.binary_cross_entropy_with_logits(logits, labels.to(logits.device, logits.dtype))

    def forward(self, batch: list[RerankIn]) -> list[RerankOut]:
        queries = [item.query for item in batch for _ in item.candidates]
        texts = [text for item in batch for text in item.candidates]
        scores: list[float] = []
        with self.inference():
            for start in range(0, len(texts), self.batch_size):
                end = start + self.batch_size
                scores.extend(self.score_pairs(queries[start:end], texts[start:end]).float().cpu().tolist())
        out, start = [], 0
        for item in batch:
            out.append(RerankOut(tuple(scores[start:start + len(item.candidates)])))
            start += len(item.candidates)
        return out
