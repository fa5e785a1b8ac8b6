"""The LLM-free categorizer (Mnemis's categorize slot without a model) and the clustering it
uses: many-to-many by soft assignment, no category over half the nodes, names from the
children, meaning-cut batches."""

from __future__ import annotations

import math

import numpy as np

from memlab.embed.base import Embedder
from memlab.memory.clustering import balanced_groups, normalised, spherical_kmeans
from memlab.stages.categorize import CategorizeIn, ClusterCategorizer, NodeCard
from memlab.stages.categorize.base import broken_rules
from memlab.stages.categorize.clustered import most_central


class AngleEmbedder(Embedder):
    """Each text's vector is the unit vector at the angle (degrees) its node name is mapped to."""

    def __init__(self, angles: dict[str, float]) -> None:
        super().__init__()
        self.angles = angles

    def _load(self) -> None:
        pass

    def _encode(self, texts: list[str]) -> np.ndarray:
        found = [self.angles[t.split(" [")[0].split(":")[0]] for t in texts]
        return np.array([[math.cos(math.radians(a)), math.sin(math.radians(a))] for a in found], dtype=np.float32)

    def _dim(self) -> int:
        return 2

    def _count_tokens(self, text: str) -> int:
        return len(text.split())

    def _identity(self) -> dict:
        return {"model": "angles"}


def cards(tags: dict[str, tuple[str, ...]]) -> tuple[NodeCard, ...]:
    return tuple(NodeCard(name, t) for name, t in tags.items())


def test_clusters_are_many_to_many_named_from_children_and_never_over_half():
    angles = {"apple": 0, "pear": 4, "plum": 8, "fig": 12, "dog": 90, "cat": 94, "owl": 98, "bat": 102,
              "tomato": 51, "Rome": 200, "Oslo": 204, "Lima": 208}  # tomato lies between fruit and animals
    tags = ({n: ("fruit",) for n in ("apple", "pear", "plum", "fig")} | {n: ("animal",) for n in ("dog", "cat", "owl", "bat")}
            | {n: ("city",) for n in ("Rome", "Oslo", "Lima")})
    nodes = cards(tags | {"tomato": ("fruit", "vegetable")})
    stage = ClusterCategorizer(AngleEmbedder(angles), children_per_category=4, margin=0.2)
    out = stage([CategorizeIn(1, nodes)])[0]
    named = {c.name: sorted(nodes[i].name for i in c.members) for c in out.categories}
    assert named == {"fruit": ["apple", "fig", "pear", "plum", "tomato"], "animal": ["bat", "cat", "dog", "owl", "tomato"],
                     "city": ["Lima", "Oslo", "Rome"]}
    assert not broken_rules(out.categories, len(nodes))
    # no soft membership with a zero margin: a tree, as community detection makes
    tree = ClusterCategorizer(AngleEmbedder(angles), children_per_category=4, margin=0.0)([CategorizeIn(1, nodes)])[0]
    assert sum(len(c.members) for c in tree.categories) == len(nodes)


def test_one_tight_group_is_cut_to_at_most_half_and_names_stay_distinct():
    angles = {f"n{i}": i * 0.5 for i in range(10)} | {"x": 180, "y": 182}
    nodes = cards({name: () for name in angles})
    out = ClusterCategorizer(AngleEmbedder(angles), children_per_category=6, margin=0.0)([CategorizeIn(1, nodes)])[0]
    assert max(len(c.members) for c in out.categories) <= len(nodes) // 2
    assert sorted(i for c in out.categories for i in c.members) == list(range(12))
    names = [c.name for c in out.categories]
    assert len(set(names)) == len(names) and all(" / " in name for name in names)  # no shared tag: children named


def test_kmeans_separates_three_kinds_and_batches_keep_kinds_together():
    rng = np.random.default_rng(1)
    centres = np.eye(3, dtype=np.float32)
    vectors = np.concatenate([c + 0.05 * rng.standard_normal((6, 3)) for c in centres]).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    order = rng.permutation(18)
    assignment = spherical_kmeans(vectors[order], 3, seed=0)
    kinds = order // 6
    assert all(len(set(assignment[kinds == k])) == 1 for k in range(3)) and len(set(assignment)) == 3
    groups = balanced_groups(vectors[order], 12)
    assert sorted(len(g) for g in groups) == [6, 12] and sorted(i for g in groups for i in g) == list(range(18))
    assert all(len({kinds[i] for i in g}) == len(g) // 6 for g in groups)  # whole kinds packed, never split
    assert balanced_groups(np.ones((5, 3), dtype=np.float32), 2) == [[0, 1], [2, 3], [4]]  # identical: by order
    # clusters smaller than a batch: each batch holds several kinds, each kind's members together
    mixed = balanced_groups(vectors[order], 9, cluster_size=3)
    assert sorted(len(g) for g in mixed) == [9, 9] and all(len({kinds[i] for i in g}) >= 2 for g in mixed)
    assert all(sum(kinds[i] == k for i in g) % 3 == 0 for g in mixed for k in range(3))


def test_equally_central_children_keep_their_listing_order_in_a_name():
    """Two children are equally central by construction; which one rounding favoured depended on the
    numeric libraries, so a name (and the next layer's clusters) flipped between machines."""
    vectors = normalised(np.array([[1.0, 0.0], [0.6, 0.8], [1.0, 1e-6]], dtype=np.float32))
    assert most_central(vectors, [0, 1]) == [0, 1] and most_central(vectors, [1, 0]) == [1, 0]
    assert most_central(vectors, [1, 0, 2]) == [0, 2, 1] and most_central(vectors, [1, 2, 0]) == [2, 0, 1]
    angles = {"oak": 0, "elm": 37, "Rome": 180, "Oslo": 217}
    for listed in (("oak", "elm", "Rome", "Oslo"), ("elm", "oak", "Oslo", "Rome")):
        out = ClusterCategorizer(AngleEmbedder(angles), children_per_category=2, margin=0.0)(
            [CategorizeIn(1, cards({name: () for name in listed}))])[0]
        assert sorted(c.name for c in out.categories) == sorted([f"{listed[0]} / {listed[1]}", f"{listed[2]} / {listed[3]}"])
