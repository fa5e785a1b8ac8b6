from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from memlab.memory.graph import MemoryGraph
from memlab.stage import Stage
from memlab.stages.traverse import TraversalPolicy, TraverseIn

Q = np.array([1.0, 0.0], dtype=np.float32)


def vec(sim: float) -> np.ndarray:
    """A unit vector whose cosine with Q is ``sim``."""
    return np.array([sim, math.sqrt(1 - sim * sim)], dtype=np.float32)


def small_graph() -> MemoryGraph:
    """a -causal-> b, a -temporal-> c, c -temporal-> d; all neighbours equally similar to Q."""
    g = MemoryGraph()
    for node in "abcd":
        g.add_node(node, "event", text=node, embedding=vec(0.5))
    g.add_edge("a", "b", "causal")
    g.add_edge("a", "c", "temporal")
    g.add_edge("c", "d", "temporal")
    return g


def run(policy: TraversalPolicy, graph: MemoryGraph, intent: str, anchors=("a",), edge_types=None):
    return policy.run_one(TraverseIn(graph, Q, intent, tuple((a, 1.0) for a in anchors), edge_types))


def test_intent_decides_which_edge_is_followed_first():
    policy = TraversalPolicy(beam_width=1, max_depth=1)
    assert [n for n, _, _ in run(policy, small_graph(), "WHY").visited] == ["a", "b"]
    assert [n for n, _, _ in run(policy, small_graph(), "WHEN").visited] == ["a", "c"]


def test_scores_follow_equation_5_and_the_decay():
    policy = TraversalPolicy(weights={i: {"temporal": 2.0, "causal": 1.0, "semantic": 0.0, "entity": 0.0}
                                      for i in ("WHY", "WHEN", "ENTITY")},
                             lambda1=1.0, lambda2=0.5, gamma=0.5, beam_width=5)
    out = run(policy, small_graph(), "WHEN")
    anchor = math.exp(0.5 * 0.5)
    c = anchor * 0.5 + math.exp(2.0 + 0.25)
    b = anchor * 0.5 + math.exp(1.0 + 0.25)
    d = c * 0.5 + math.exp(2.0 + 0.25)
    scores = out.scores()
    assert scores["a"] == pytest.approx(anchor, rel=1e-5)
    assert scores["c"] == pytest.approx(c, rel=1e-5)
    assert scores["b"] == pytest.approx(b, rel=1e-5)
    assert scores["d"] == pytest.approx(d, rel=1e-5)
    # visit order: anchor, then depth 1 by score (c before b), then depth 2
    assert [(n, depth) for n, _, depth in out.visited] == [("a", 0), ("c", 1), ("b", 1), ("d", 2)]
    assert out.transition["d"] == pytest.approx(math.exp(2.25), rel=1e-5)


def test_similarity_breaks_ties_and_drop_threshold_prunes():
    g = MemoryGraph()
    g.add_node("a", "event", embedding=vec(0.9))
    g.add_node("near", "event", embedding=vec(0.8))
    g.add_node("far", "event", embedding=vec(0.3))
    g.add_node("off", "event", embedding=vec(0.05))
    for n in ("near", "far", "off"):
        g.add_edge("a", n, "semantic", directed=False)
    out = run(TraversalPolicy(uniform=True), g, "ENTITY")
    assert [n for n, _, _ in out.visited] == ["a", "near", "far"]  # "off" is below 0.15


def test_entity_nodes_without_embeddings_are_bridges():
    g = MemoryGraph()
    g.add_node("e1", "event", embedding=vec(0.9))
    g.add_node("e2", "event", embedding=vec(0.6))
    g.add_node("ent:melanie", "entity", text="Melanie")
    g.add_edge("e1", "ent:melanie", "entity")
    g.add_edge("e2", "ent:melanie", "entity")
    out = run(TraversalPolicy(), g, "ENTITY", anchors=("e1",))
    assert [n for n, _, _ in out.visited] == ["e1", "ent:melanie", "e2"]
    # the same graph without entity edges in the allowed set reaches nothing
    assert [n for n, _, _ in run(TraversalPolicy(), g, "ENTITY", ("e1",), ("temporal",)).visited] == ["e1"]


def test_budget_and_depth_limit_the_search():
    g = MemoryGraph()
    for i in range(30):
        g.add_node(f"n{i}", "event", embedding=vec(0.5))
        if i:
            g.add_edge(f"n{i-1}", f"n{i}", "temporal")
    assert len(run(TraversalPolicy(max_depth=5), g, "WHEN", ("n0",)).visited) == 6
    assert len(run(TraversalPolicy(max_depth=50, max_nodes=12), g, "WHEN", ("n0",)).visited) == 12


def test_gradients_reach_every_parameter():
    policy = TraversalPolicy(beam_width=5)
    out = run(policy, small_graph(), "WHY")
    out.score_tensor.sum().backward()
    for name, param in policy.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


def test_fixed_weight_variant_has_no_gradients_and_round_trips(tmp_path):
    policy = TraversalPolicy(trainable=False, lambda2=0.7)
    assert not any(p.requires_grad for p in policy.parameters())
    with torch.no_grad():
        policy.weight[0, 1] = 9.0
    loaded = Stage.load(policy.save(tmp_path / "policy"))
    assert isinstance(loaded, TraversalPolicy)
    assert loaded.weight[0, 1].item() == 9.0 and loaded.lambda2.item() == pytest.approx(0.7)
    assert not loaded.weight.requires_grad


def test_bad_weights_are_rejected():
    with pytest.raises(ValueError, match="WHY"):
        TraversalPolicy(weights={"WHEN": {}})
    with pytest.raises(ValueError, match="unknown edge types"):
        TraversalPolicy(weights={i: {"temporal": 1, "causal": 1, "semantic": 1, "entity": 1, "bogus": 1}
                                 for i in ("WHY", "WHEN", "ENTITY")})
