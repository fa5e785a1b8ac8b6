"""A bi-encoder: one ``TextEncoder`` (MiniLM + optional LoRA) for questions and memory units."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from memlab.bounds import PositiveFloat, PositiveInt
from memlab.stages.encoder import EncoderStage, TextEncoder
from memlab.stages.retrieve.base import TrainableEmbedder


class BiEncoderEmbedder(EncoderStage, TrainableEmbedder):
    """Mean-pooled, L2-normalised vectors of one shared encoder; cosine is the relevance score.

    Untrained (an ``encoder`` on the packaged MiniLM, mean pooling) it gives the vectors of the
    default ``SentenceTransformerEmbedder`` up to float error. ``query_prefix`` /
    ``document_prefix`` mark the two sides (empty by default: a symmetric model). What trains
    is the encoder's setting (a LoRA adapter, ~1 MB saved, or all of it). Training API: ``embed`` (differentiable vectors) and ``loss`` (InfoNCE over the
    in-batch and hard negatives at ``temperature``).
    """

    def __init__(
        self,
        encoder: TextEncoder,
        batch_size: PositiveInt = 64,
        temperature: PositiveFloat = 0.05,
        query_prefix: str = "",
        document_prefix: str = "",
        device: str = "cpu",
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.batch_size = batch_size
        self.temperature = temperature
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        self.device = device

    def _build_heads(self, hidden_size: int) -> None:
        """No head: the encoder's pooled vector is the embedding."""

    # -- training ----------------------------------------------------------------------
    def embed(self, texts: list[str], is_query: bool) -> torch.Tensor:
        """Normalised vectors ``[len(texts), hidden]``; differentiable."""
        prefix = self.query_prefix if is_query else self.document_prefix
        return F.normalize(self.encode_texts([prefix + t for t in texts]), dim=-1)

    def loss(self, queries: torch.Tensor, documents: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """InfoNCE: query ``i`` against every document of the batch, its target ``targets[i]``."""
        return F.cross_entropy(queries @ documents.T / self.temperature, targets.to(queries.device))

    # -- the embedder contract ---------------------------------------------------------
    def _load(self) -> None:
        EncoderStage.warm_up(self)

    def _run(self, texts: list[str], is_query: bool) -> np.ndarray:
        with self.inference():
            return self.embed(texts, is_query).float().cpu().numpy()

    def _encode(self, texts: list[str]) -> np.ndarray:
        return self._run(texts, is_query=False)

    def _encode_queries(self, texts: list[str]) -> np.ndarray:
        return self._run(texts, is_query=True)

    def _dim(self) -> int:
        return self.encoder.hidden_size

    def _count_tokens(self, text: str) -> int:
        return len(self.encoder.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

    def _identity(self) -> dict[str, Any]:
        digest = hashlib.sha256()
        for name, tensor in sorted(self.checkpoint_state().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().float().cpu().numpy().tobytes())
        return {"class": f"{type(self).__module__}.{type(self).__qualname__}",
                "model": "sentence-transformers/all-MiniLM-L6-v2" if self.encoder.path is None else self.encoder.path,
                "weights": digest.hexdigest()[:16], "max_length": self.encoder.max_length,
                "query_prefix": self.query_prefix, "document_prefix": self.document_prefix}
