"""Categories without a language model: the LLM-free hierarchy of Mnemis's categorize slot.

Mnemis (section 5) sets its LLM-made hierarchy against GraphRAG's, built by community
detection with one parent per node. This stage is that alternative made to the rules of
section 2.2, so that the two hierarchies can be compared in one pipeline: the nodes of a
batch are embedded (``name [tags]: summary``) and grouped by spherical k-means (k-means++ seeding) into about
``len(nodes) / children_per_category`` clusters; a node also joins each other cluster whose
centroid is nearly as close as its own (cosine within ``margin``, at most ``max_memberships``
clusters: **many-to-many**, section 2.2); no cluster takes more than ``max_share`` of the nodes
(a larger one is cut in two again, and soft members stop joining a full one: Minimum Concept
Abstraction). The **compression ratio** and the **reduction rule** are the pipeline's, as for
every categorizer: clusters with too few children dissolve there.

A category's name is made in code from its children: the tag most of them carry (at least half
of them, and two), among the tags no child is named and no other category of the batch took, else the names of its
``NAMED_CHILDREN`` most central children ("tennis / golf"; equally central ones in their listed order, so that
rounding never picks a name). No call, no training: a full conversation's hierarchy in seconds.
"""

from __future__ import annotations

from collections import Counter
from functools import cmp_to_key

import numpy as np

from memlab.bounds import PositiveInt, UnitFloat
from memlab.embed.base import Embedder
from memlab.memory.clustering import normalised, spherical_kmeans
from memlab.stages.categorize.base import (
    MAX_CATEGORY_SHARE,
    RULED_BATCH,
    CategorizeIn,
    CategorizeOut,
    Categorizer,
    Category,
    NodeCard,
)

#: Children named in a category name made without a shared tag, and the words kept of each
#: (of a child that is itself such a category, its first child's).
NAMED_CHILDREN = 2
NAME_WORDS = 3
#: Cosines closer than this are a tie, broken by the children's order: the two children of a
#: cluster are equally central by construction, and which one rounding favours depends on the
#: numeric libraries (a name that flips changes the next layer's embeddings and clusters).
CENTRALITY_TIE = 1e-5


def card_text(card: NodeCard) -> str:
    tags = f" [{', '.join(card.tags)}]" if card.tags else ""
    return f"{card.name}{tags}: {card.summary}" if card.summary else f"{card.name}{tags}"


class ClusterCategorizer(Categorizer):
    """Embedding clusters as categories (module docstring); ``embedder`` is injected."""

    def __init__(
        self,
        embedder: Embedder,
        children_per_category: PositiveInt = 4,
        margin: UnitFloat = 0.05,
        max_memberships: PositiveInt = 2,
        max_share: UnitFloat = MAX_CATEGORY_SHARE,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.embedder = embedder
        self.children_per_category = children_per_category
        self.margin = margin
        self.max_memberships = max_memberships
        self.max_share = max_share
        self.seed = seed

    def forward(self, batch: list[CategorizeIn]) -> list[CategorizeOut]:
        return [self.categorize(item) for item in batch]

    def categorize(self, item: CategorizeIn) -> CategorizeOut:
        n = len(item.nodes)
        if n < 2:
            return CategorizeOut()
        vectors = normalised(np.asarray(self.embedder.encode([card_text(c) for c in item.nodes]), dtype=np.float32))
        capacity = n if n < RULED_BATCH else max(1, int(self.max_share * n))
        clusters = self.clusters(vectors, list(range(n)), max(2, round(n / self.children_per_category)), capacity)
        members = self.with_soft_members(vectors, clusters, capacity)
        names = self.names(item.nodes, members, vectors)
        return CategorizeOut(tuple(Category(name, tuple(sorted(m))) for name, m in zip(names, members)))

    def clusters(self, vectors: np.ndarray, rows: list[int], k: int, capacity: int) -> list[list[int]]:
        """Hard clusters of ``rows``, none over ``capacity`` (a larger one is cut in two again)."""
        assignment = spherical_kmeans(vectors[rows], k, self.seed)
        found = [[row for row, a in zip(rows, assignment) if a == c] for c in sorted(set(assignment.tolist()))]
        done: list[list[int]] = []
        for cluster in found:
            if len(cluster) <= capacity:
                done.append(cluster)
            elif len(found) > 1:
                done.extend(self.clusters(vectors, cluster, 2, capacity))
            else:  # k-means cannot separate them (near-identical vectors): cut by order
                done.extend(cluster[i:i + capacity] for i in range(0, len(cluster), capacity))
        return done

    def with_soft_members(self, vectors: np.ndarray, clusters: list[list[int]], capacity: int) -> list[list[int]]:
        """Each node also in the other clusters whose centroid is within ``margin`` of its own's."""
        centroids = normalised(np.stack([vectors[c].mean(0) for c in clusters]))
        similarity = vectors @ centroids.T
        members = [list(c) for c in clusters]
        home = {row: i for i, c in enumerate(clusters) for row in c}
        for row in range(len(vectors)):
            own = similarity[row, home[row]]
            others = [c for c in np.argsort(-similarity[row], kind="stable") if c != home[row]]
            for c in others[:self.max_memberships - 1]:
                if similarity[row, c] >= own - self.margin and len(members[c]) < capacity:
                    members[c].append(row)
        return members

    def names(self, nodes: tuple[NodeCard, ...], members: list[list[int]], vectors: np.ndarray) -> list[str]:
        """A name per cluster from its children (module docstring), distinct within the batch."""
        taken = {card.name.casefold() for card in nodes}
        names: list[str] = []
        for cluster in members:
            counts = Counter(tag for row in cluster for tag in dict.fromkeys(nodes[row].tags))
            carried = max(2, -(-len(cluster) // 2))  # by at least half of the children
            tag = next((t for t, c in counts.most_common() if c >= carried and t.casefold() not in taken), None)
            if tag is None:
                central = most_central(vectors, cluster)[:NAMED_CHILDREN]
                tag = " / ".join(" ".join(nodes[row].name.split(" / ")[0].split()[:NAME_WORDS]) for row in central)
                while tag.casefold() in taken:
                    tag += "+"
            taken.add(tag.casefold())
            names.append(tag)
        return names


def most_central(vectors: np.ndarray, rows: list[int]) -> list[int]:
    """``rows`` by cosine to their centroid, highest first; a tie (``CENTRALITY_TIE``) keeps their order."""
    centre = normalised(vectors[rows].mean(0, keepdims=True))[0]
    closeness = dict(zip(rows, (vectors[rows] @ centre).tolist()))

    def before(a: int, b: int) -> int:
        if abs(closeness[a] - closeness[b]) <= CENTRALITY_TIE:
            return rows.index(a) - rows.index(b)
        return -1 if closeness[a] > closeness[b] else 1

    return sorted(rows, key=cmp_to_key(before))
