"""MAGMA's adaptive traversal policy and its heuristic beam search (3.3 stage 3, Algorithm 1).

Transition score (Eq. 5, 6) for moving from node u to neighbour v over an edge of type r,
for a query q of intent T_q:

    S(v | u, q) = exp(lambda1 * w_{T_q} . 1_r  +  lambda2 * cos(v, q))

and the cumulative score of v is ``score_u * gamma + S(v | u, q)`` (Algorithm 1, line 12).
The intent-by-edge-type matrix ``w``, ``lambda1``, ``lambda2`` and ``gamma`` are
``nn.Parameter``s, initialised from Table 6, so the policy can be trained from evidence
supervision; ``trainable=False`` freezes them (the paper's fixed-weight policy) and
``uniform=True`` gives every intent and edge type the same weight (Table 4, "w/o Adaptive
Policy").

Choices the paper leaves open (stated here once)
------------------------------------------------
* Table 6 gives ranges, not one value per intent; the defaults in ``DEFAULT_WEIGHTS`` pick
  inside each range, with the intent's favoured edge type at the top of its range
  (WHY -> causal, WHEN -> temporal, ENTITY -> entity). Table 6's ``w_phrase`` is read as the
  semantic-edge weight. ``lambda1 = 1.0`` and ``lambda2 = 0.5`` (range 0.3-0.7).
* ``gamma`` (decay) and the beam width are not published: 0.5 and 10.
* Edges are followed in both directions (a "why" question usually lands on the effect and
  must walk back to its cause; a temporal neighbour before an event is as relevant as one
  after it).
* An anchor starts with score ``exp(lambda2 * cos(anchor, q))`` (Eq. 5 without a structural
  term). A neighbour whose similarity to the query is below ``drop_threshold`` (Table 6,
  0.15) is dropped; nodes without an embedding (entity nodes) have similarity 0 and are
  never dropped: they are bridges between events.
* A node reached from several frontier nodes keeps its best cumulative score.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from memlab.bounds import PositiveInt, UnitFloat
from memlab.stages.traverse.base import TraverseIn, TraverseOut, Traverser

INTENTS: tuple[str, ...] = ("WHY", "WHEN", "ENTITY")
EDGE_TYPES: tuple[str, ...] = ("temporal", "causal", "semantic", "entity")

#: w_{T_q} per intent, inside Table 6's ranges (entity 2.5-6.0, temporal 0.5-4.0,
#: causal 3.0-5.0, phrase/semantic 2.5-5.0).
DEFAULT_WEIGHTS: dict[str, dict[str, float]] = {
    "WHY": {"temporal": 1.0, "causal": 5.0, "semantic": 2.5, "entity": 2.5},
    "WHEN": {"temporal": 4.0, "causal": 3.0, "semantic": 2.5, "entity": 2.5},
    "ENTITY": {"temporal": 0.5, "causal": 3.0, "semantic": 2.5, "entity": 6.0},
}


class TraversalPolicy(Traverser):
    """Intent-weighted beam search over a ``MemoryGraph`` (see the module docstring)."""

    def __init__(
        self,
        intents: list[str] | tuple[str, ...] = INTENTS,
        edge_types: list[str] | tuple[str, ...] = EDGE_TYPES,
        weights: dict[str, dict[str, float]] | None = None,
        lambda1: float = 1.0,
        lambda2: float = 0.5,
        gamma: UnitFloat = 0.5,
        beam_width: PositiveInt = 10,
        max_depth: PositiveInt = 5,
        max_nodes: PositiveInt = 200,
        drop_threshold: float = 0.15,
        default_intent: str = "ENTITY",
        uniform: bool = False,
        uniform_weight: float = 1.0,
        trainable: bool = True,
    ) -> None:
        super().__init__()
        self.intents = tuple(intents)
        self.edge_types = tuple(edge_types)
        if default_intent not in self.intents:
            raise ValueError(f"default_intent {default_intent!r} is not one of the intents {self.intents}")
        weights = DEFAULT_WEIGHTS if weights is None else weights
        matrix = torch.full((len(self.intents), len(self.edge_types)), float(uniform_weight))
        if not uniform:
            for i, intent in enumerate(self.intents):
                if intent not in weights:
                    raise ValueError(f"weights: no row for intent {intent!r} (have {sorted(weights)})")
                unknown = set(weights[intent]) - set(self.edge_types)
                if unknown:
                    raise ValueError(f"weights[{intent!r}]: unknown edge types {sorted(unknown)}")
                for j, edge_type in enumerate(self.edge_types):
                    if edge_type not in weights[intent]:
                        raise ValueError(f"weights[{intent!r}]: no weight for edge type {edge_type!r}")
                    matrix[i, j] = float(weights[intent][edge_type])
        self.weight = nn.Parameter(matrix, requires_grad=trainable)
        self.lambda1 = nn.Parameter(torch.tensor(float(lambda1)), requires_grad=trainable)
        self.lambda2 = nn.Parameter(torch.tensor(float(lambda2)), requires_grad=trainable)
        self.gamma = nn.Parameter(torch.tensor(float(gamma)), requires_grad=trainable)
        self.beam_width = beam_width
        self.max_depth = max_depth
        self.max_nodes = max_nodes
        self.drop_threshold = drop_threshold
        self.default_intent = default_intent

    # -- scoring ---------------------------------------------------------------------------
    def intent_index(self, intent: str) -> int:
        return self.intents.index(intent if intent in self.intents else self.default_intent)

    def transition_scores(self, intent: str, edge_types: list[str], sims: torch.Tensor) -> torch.Tensor:
        """Eq. 5 for a batch of moves: ``exp(lambda1 * w[intent, type] + lambda2 * sim)``."""
        rows = self.weight[self.intent_index(intent)]
        structural = rows[torch.tensor([self.edge_types.index(t) for t in edge_types], dtype=torch.long)]
        return torch.exp(self.lambda1 * structural + self.lambda2 * sims)

    # -- search ----------------------------------------------------------------------------
    def forward(self, batch: list[TraverseIn]) -> list[TraverseOut]:
        return [self._search(item) for item in batch]

    def _search(self, item: TraverseIn) -> TraverseOut:
        allowed = [t for t in self.edge_types if item.edge_types is None or t in item.edge_types]
        query = _unit(np.asarray(item.query_vector, dtype=np.float32).reshape(-1))
        graph = item.graph
        with graph.locked():
            similarity = _SimilarityCache(graph, query)
            scores: dict[str, torch.Tensor] = {}
            depth_of: dict[str, int] = {}
            transition: dict[str, float] = {}
            beam_steps: list[tuple[list[str], torch.Tensor]] = []
            for node, _ in item.anchors:
                if node in scores or not graph.has_node(node):
                    continue
                scores[node] = torch.exp(self.lambda2 * similarity(node))
                depth_of[node] = 0
            frontier = list(scores)
            for depth in range(1, self.max_depth + 1):
                if not frontier or len(scores) >= self.max_nodes or not allowed:
                    break
                moves = [
                    (u, v, edge_type)
                    for u in frontier
                    for v, edge_type, _ in graph.neighbors(u, edge_types=allowed, direction="both")
                    if v not in scores and (not similarity.has(v) or similarity(v) >= self.drop_threshold)
                ]
                if not moves:
                    break
                sims = torch.tensor([similarity(v) for _, v, _ in moves], dtype=torch.float32)
                steps = self.transition_scores(item.intent, [t for _, _, t in moves], sims)
                candidates: dict[str, tuple[torch.Tensor, float]] = {}
                for (u, v, _), step in zip(moves, steps):
                    cumulative = scores[u] * self.gamma + step
                    if v not in candidates or cumulative.item() > candidates[v][0].item():
                        candidates[v] = (cumulative, step.item())
                ranked = sorted(candidates, key=lambda v: -candidates[v][0].item())
                beam_steps.append((ranked, torch.stack([candidates[v][0] for v in ranked])))
                room = self.max_nodes - len(scores)
                frontier = ranked[: min(self.beam_width, room)]
                for v in frontier:
                    scores[v], transition[v] = candidates[v]
                    depth_of[v] = depth
        visited = [(node, score.item(), depth_of[node]) for node, score in scores.items()]
        score_tensor = torch.stack(list(scores.values())) if scores else torch.zeros(0)
        return TraverseOut(visited=visited, transition=transition, score_tensor=score_tensor, steps=beam_steps)


class _SimilarityCache:
    """Cosine similarity of nodes to the query, read once per node (caller holds the lock)."""

    def __init__(self, graph, query: np.ndarray) -> None:
        self.graph = graph
        self.query = query
        self._sims: dict[str, float | None] = {}

    def _lookup(self, node: str) -> float | None:
        if node not in self._sims:
            vector = self.graph.node(node)["embedding"]
            self._sims[node] = None if vector is None or self.query.size == 0 else float(_unit(vector) @ self.query)
        return self._sims[node]

    def has(self, node: str) -> bool:
        return self._lookup(node) is not None

    def __call__(self, node: str) -> float:
        sim = self._lookup(node)
        return 0.0 if sim is None or math.isnan(sim) else sim


def _unit(vector: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector
