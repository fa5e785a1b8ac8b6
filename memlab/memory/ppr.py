"""Personalized PageRank on sparse matrices (EMem-G 3.3; HippoRAG-style seeded propagation).

``pi = (1 - alpha) * s + alpha * P^T pi``, where ``P`` is the row-stochastic transition
matrix of the graph (a walker leaves a node along its edges in proportion to their
weights), ``s`` the normalised seed vector and ``alpha`` the damping factor (probability of
following an edge rather than jumping back to the seeds). A node without edges sends its
mass back to the seeds, the convention of ``networkx.pagerank(dangling=None)``, so the
result matches it. Solved by a few power iterations of one sparse mat-vec each.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import scipy.sparse as sp

from memlab.memory.graph import MemoryGraph


def adjacency_matrix(
    graph: MemoryGraph, edge_types: Iterable[str] | None = None
) -> tuple[list[str], sp.csr_matrix]:
    """(node ids, weighted adjacency ``A[i, j]``) of ``graph``; undirected edges both ways.

    Parallel edges between the same two nodes add their weights.
    """
    wanted = None if edge_types is None else set(edge_types)
    with graph.locked():
        ids = graph.nodes()
        index = {node: i for i, node in enumerate(ids)}
        rows, cols, weights = [], [], []
        for src, dst, data in graph.edges():
            if wanted is not None and data["type"] not in wanted:
                continue
            rows.append(index[src])
            cols.append(index[dst])
            weights.append(data["weight"])
            if not data["directed"] and src != dst:
                rows.append(index[dst])
                cols.append(index[src])
                weights.append(data["weight"])
    n = len(ids)
    matrix = sp.coo_matrix((np.asarray(weights, dtype=np.float64), (rows, cols)), shape=(n, n)).tocsr()
    matrix.sum_duplicates()
    return ids, matrix


def transition_matrix(adjacency: sp.spmatrix) -> tuple[sp.csr_matrix, np.ndarray]:
    """(``P^T`` as CSR, boolean mask of dangling nodes) for a non-negative adjacency matrix."""
    adjacency = sp.csr_matrix(adjacency, dtype=np.float64)
    if adjacency.shape[0] != adjacency.shape[1]:
        raise ValueError(f"adjacency must be square, got shape {adjacency.shape}")
    if adjacency.nnz and adjacency.data.min() < 0:
        raise ValueError("adjacency weights must be non-negative")
    out_weight = np.asarray(adjacency.sum(axis=1)).ravel()
    dangling = out_weight <= 0
    inverse = np.zeros_like(out_weight)
    inverse[~dangling] = 1.0 / out_weight[~dangling]
    row_stochastic = sp.diags(inverse) @ adjacency
    return sp.csr_matrix(row_stochastic.T), dangling


def personalized_pagerank(
    adjacency: sp.spmatrix,
    seeds: np.ndarray,
    damping: float = 0.5,
    iterations: int = 50,
    tolerance: float = 1e-10,
) -> np.ndarray:
    """PPR scores (summing to 1) for the seed weights ``seeds`` (non-negative, not all zero).

    Stops after ``iterations`` power iterations or once the L1 change drops below
    ``tolerance``.
    """
    if not 0.0 < damping < 1.0:
        raise ValueError(f"damping must be in (0, 1), got {damping}")
    seeds = np.asarray(seeds, dtype=np.float64).ravel()
    if seeds.shape[0] != adjacency.shape[0]:
        raise ValueError(f"{seeds.shape[0]} seed weights for a graph of {adjacency.shape[0]} nodes")
    if (seeds < 0).any() or seeds.sum() <= 0:
        raise ValueError("seed weights must be non-negative with a positive sum")
    s = seeds / seeds.sum()
    transposed, dangling = transition_matrix(adjacency)
    pi = s.copy()
    for _ in range(iterations):
        walked = transposed @ pi + pi[dangling].sum() * s
        new = (1.0 - damping) * s + damping * walked
        change = np.abs(new - pi).sum()
        pi = new
        if change < tolerance:
            break
    return pi
