"""Rerank family: a query and candidate unit texts -> one relevance score per candidate."""

from __future__ import annotations

from dataclasses import dataclass

from memlab.stage import Stage


@dataclass(frozen=True)
class RerankIn:
    query: str
    candidates: tuple[str, ...]


@dataclass(frozen=True)
class RerankOut:
    #: One score per candidate, higher is more relevant.
    scores: tuple[float, ...]
    error: str | None = None


class Reranker(Stage[RerankIn, RerankOut]):
    """Base class of the rerank family (``In = RerankIn``, ``Out = RerankOut``)."""

    In = RerankIn
    Out = RerankOut
