"""Retrieve family: trainable text encoders that fill the embedder slot (issue 25).

A pipeline's ``embedder`` is any ``memlab.embed.Embedder``. A *trainable* one is also a stage,
so it trains with a recipe, saves and loads as a checkpoint (``Stage.save`` / ``load_stage``)
and plugs into any pipeline by one config line. Its stage signature is the embedder's contract
in batch form: ``EmbedIn(text, is_query)`` -> ``EmbedOut(vector)`` (L2-normalised); queries
and documents may be encoded differently (an asymmetric model). Its ``identity`` includes a
fingerprint of its trained weights, so a memory built with one checkpoint refuses to be
queried with another (``memlab.memory.store.check_embedder``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memlab.embed.base import Embedder
from memlab.stage import Stage


@dataclass(frozen=True)
class EmbedIn:
    text: str
    is_query: bool = False


@dataclass(frozen=True)
class EmbedOut:
    vector: np.ndarray  # float32, L2-normalised


class TrainableEmbedder(Stage[EmbedIn, EmbedOut], Embedder):
    """Base class of the family: a stage whose ``forward`` is ``Embedder.encode`` / ``encode_queries``."""

    In = EmbedIn
    Out = EmbedOut

    def __init__(self) -> None:
        Stage.__init__(self)
        Embedder.__init__(self)

    def forward(self, batch: list[EmbedIn]) -> list[EmbedOut]:
        out: list[EmbedOut | None] = [None] * len(batch)
        for is_query in (False, True):
            index = [i for i, item in enumerate(batch) if item.is_query == is_query]
            if index:
                texts = [batch[i].text for i in index]
                vectors = self.encode_queries(texts) if is_query else self.encode(texts)
                for i, vector in zip(index, vectors):
                    out[i] = EmbedOut(vector)
        return out  # type: ignore[return-value]
