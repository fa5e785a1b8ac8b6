"""Traverse family: a memory graph, a query and anchor nodes -> the nodes reached, scored.

A traversal stage expands a set of anchor (entry) nodes of a ``MemoryGraph`` into the
subgraph a query needs (MAGMA 3.3, stage 3). Implementations differ in how they score a
move from a node to its neighbour; all return the visited nodes with the score that got
them there.

Contract
--------
* ``TraverseIn.anchors`` are ``(node id, score)`` pairs, best first; anchors are always part
  of the output.
* ``TraverseIn.edge_types`` restricts the edges followed (an ablation that removes an edge
  space lists the others); ``None`` follows every edge type the stage knows.
* ``TraverseIn.intent`` is the router's label (e.g. ``WHY``); a stage that does not know it
  treats it as its default intent.
* ``TraverseOut.visited`` lists ``(node id, cumulative score, depth)`` in visit order
  (anchors at depth 0). ``TraverseOut.transition`` maps each non-anchor node to the
  transition score of the step that reached it (what salience budgeting reads).
* The stage reads the graph under ``graph.locked()`` so a background writer cannot change it
  mid-traversal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memlab.memory.graph import MemoryGraph
from memlab.stage import Stage


@dataclass(frozen=True)
class TraverseIn:
    graph: MemoryGraph
    #: The query's embedding (same space as the nodes' ``embedding``).
    query_vector: np.ndarray
    intent: str
    anchors: tuple[tuple[str, float], ...]
    edge_types: tuple[str, ...] | None = None


@dataclass
class TraverseOut:
    visited: list[tuple[str, float, int]]
    transition: dict[str, float] = field(default_factory=dict)
    #: Cumulative scores of ``visited`` as a tensor, differentiable with respect to the
    #: stage's parameters when gradients are enabled (None for stages without parameters).
    score_tensor: Any = None
    #: Per beam step, the candidate nodes (best first) and their cumulative scores as a tensor
    #: (differentiable like ``score_tensor``): what a policy is trained on (``train/``).
    steps: list[tuple[list[str], Any]] = field(default_factory=list)

    def scores(self) -> dict[str, float]:
        return {node: score for node, score, _ in self.visited}


class Traverser(Stage[TraverseIn, TraverseOut]):
    """Base class of the traverse family (``In = TraverseIn``, ``Out = TraverseOut``)."""

    In = TraverseIn
    Out = TraverseOut
