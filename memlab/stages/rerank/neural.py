"""Cross-encoder reranker: a ``TextEncoder`` reads (query, candidate) together; a linear head gives one logit."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from memlab.bounds import NonNegativeInt, PositiveInt
from memlab.stages.encoder import EncoderStage, TextEncoder
from memlab.stages.rerank.base import RerankIn, RerankOut, Reranker


class CrossEncoderReranker(EncoderStage, Reranker):
    """Relevance logit per (query, candidate) pair, higher is more relevant.

    ``lora_rank > 0`` trains a LoRA adapter on the packaged encoder (the checkpoint holds
    the adapter and the head only); ``lora_rank=0`` fine-tunes the whole encoder. Weights
    load on first use (see ``memlab.stages.encoder``).

    Training API: ``score_pairs`` (differentiable logits) and ``loss`` (binary cross-entropy
    with logits against 0/1 relevance labels).
    """

    def __init__(
        self,
        encoder_path: str | None = None,
        lora_rank: NonNegativeInt = 8,
        lora_alpha: PositiveInt = 16,
        lora_targets: list[str] | None = None,
        max_length: PositiveInt = 256,
        batch_size: PositiveInt = 32,
        device: str = "cpu",
    ) -> None:
        super().__init__()
        if batch_size < 1:
            raise ValueError(f"CrossEncoderReranker: batch_size must be >= 1, got {batch_size}")
        self.encoder = TextEncoder(encoder_path, lora_rank=lora_rank, lora_alpha=lora_alpha, lora_targets=lora_targets,
                                   max_length=max_length)
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
        pooled = self.encoder(self.encoder.tokenize(list(queries), list(texts)))
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
