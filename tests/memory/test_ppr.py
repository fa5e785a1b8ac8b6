"""Personalized PageRank on sparse matrices (EMem-G 3.3)."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from memlab.memory.graph import MemoryGraph
from memlab.memory.ppr import adjacency_matrix, personalized_pagerank


def dense_reference(adjacency: np.ndarray, seeds: np.ndarray, damping: float) -> np.ndarray:
    """Closed form: pi = (1 - a) s + a (P^T pi + (dangling mass) s), solved exactly."""
    n = len(seeds)
    s = seeds / seeds.sum()
    out = adjacency.sum(axis=1)
    P = np.divide(adjacency, out[:, None], out=np.zeros_like(adjacency), where=out[:, None] > 0)
    dangling = (out == 0).astype(float)
    M = P.T + np.outer(s, dangling)
    return np.linalg.solve(np.eye(n) - damping * M, (1 - damping) * s)


def test_path_graph_known_answer():
    # a - b - c, seeded on a, damping 0.5: solve by hand.
    # pi_a = .5 + .5 pi_b/2, pi_b = .5 (pi_a + pi_c), pi_c = .5 pi_b/2  ->  pi = (7/12, 1/3, 1/12)
    A = sp.csr_matrix(np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]], dtype=float))
    pi = personalized_pagerank(A, np.array([1.0, 0, 0]), damping=0.5)
    np.testing.assert_allclose(pi, [7 / 12, 1 / 3, 1 / 12], atol=1e-9)


@pytest.mark.parametrize("damping", [0.3, 0.5, 0.85])
def test_matches_networkx_and_dense_solution_with_dangling_nodes(damping):
    graph = nx.gnp_random_graph(40, 0.08, seed=3, directed=True)
    graph.add_nodes_from([40, 41])  # isolated: dangling
    nodes = list(range(42))
    A = nx.to_scipy_sparse_array(graph, nodelist=nodes, format="csr").astype(float)
    rng = np.random.default_rng(0)
    seeds = np.zeros(42)
    seeds[[0, 7, 41]] = rng.random(3) + 0.1
    pi = personalized_pagerank(A, seeds, damping=damping, iterations=500, tolerance=1e-14)
    ref = nx.pagerank(graph, alpha=damping, personalization={i: seeds[i] for i in nodes}, tol=1e-13, max_iter=2000)
    np.testing.assert_allclose(pi, [ref[i] for i in nodes], atol=1e-9)
    np.testing.assert_allclose(pi, dense_reference(A.toarray(), seeds, damping), atol=1e-9)
    assert pi.sum() == pytest.approx(1.0)


def test_few_iterations_are_an_approximation_not_the_fixpoint():
    A = sp.csr_matrix(np.array([[0, 1, 1], [1, 0, 1], [1, 1, 0]], dtype=float))
    seeds = np.array([1.0, 0, 0])
    exact = dense_reference(A.toarray(), seeds, 0.5)
    one = personalized_pagerank(A, seeds, damping=0.5, iterations=1)
    assert not np.allclose(one, exact, atol=1e-6)
    np.testing.assert_allclose(personalized_pagerank(A, seeds, damping=0.5, iterations=60), exact, atol=1e-12)


def test_adjacency_from_memory_graph_counts_undirected_edges_both_ways():
    g = MemoryGraph()
    for node, kind in [("s", "session"), ("e1", "edu"), ("e2", "edu"), ("a", "argument")]:
        g.add_node(node, kind)
    g.add_edge("s", "e1", "session-edu", directed=False)
    g.add_edge("e1", "a", "edu-argument", directed=False, weight=2.0)
    g.add_edge("e2", "a", "edu-argument", directed=True)
    ids, A = adjacency_matrix(g)
    assert ids == ["s", "e1", "e2", "a"]
    dense = A.toarray()
    assert dense[0, 1] == dense[1, 0] == 1.0
    assert dense[1, 3] == dense[3, 1] == 2.0
    assert dense[2, 3] == 1.0 and dense[3, 2] == 0.0
    ids, only = adjacency_matrix(g, edge_types=["session-edu"])
    assert only.nnz == 2


def test_bad_inputs_are_rejected():
    A = sp.csr_matrix(np.eye(2))
    with pytest.raises(ValueError, match="damping"):
        personalized_pagerank(A, np.array([1.0, 0]), damping=1.0)
    with pytest.raises(ValueError, match="positive sum"):
        personalized_pagerank(A, np.zeros(2))
    with pytest.raises(ValueError, match="2 nodes"):
        personalized_pagerank(A, np.ones(3))
