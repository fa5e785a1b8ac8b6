"""Mnemis's memory: the base graph (section 2.1) and the hierarchical graph (2.2).

Base graph, on memlab's ``MemoryGraph`` + ``UnitMemory`` indexes (faiss + BM25):

* **Episodes** (node type ``episode``, part ``episodes``): a run of consecutive turns of one
  session, its text as the turns say it, ``valid_at`` = the session's date (the node and unit
  timestamp), provenance = its turn ids.
* **Entities** (``entity``): ``name``, ``summary``, ``tags`` (at most 5 descriptors of at most 3
  words), ``episodes`` (the paper's ``episode_idx``). Part ``entities`` indexes ``name: summary``
  (cosine on it stands for the paper's summary embedding; BM25 over name + summary as in 2.3),
  part ``names`` the name alone (the name embedding de-duplication searches).
* **Facts** (edges of type ``fact`` between two entities, labelled by the fact id; part ``facts``
  indexes their text): ``valid_at`` and ``invalid_at``. A contradicted fact is closed
  (``invalid_at`` set), never deleted; the graph edge is where validity lives.
* **Episodic edges** (``episodic``): entity -> each episode it appears in.

Hierarchical graph: **categories** (node type ``category``: ``name``, ``tags``, ``summary``,
``layer``) and **category edges** (``category_child``: category -> child, a lower category or an
entity). ``layers[0]`` lists the entities the hierarchy was built over, ``layers[i]`` the nodes of
layer ``i`` (its categories plus the nodes promoted from below); the last layer is where global
selection starts.

Prompt keys: an entity shows as ``E<n>`` and a category as ``C<n>`` (``key_of`` / ``id_of``).

Saving: ``save(dir)`` / ``MnemisMemory.load(dir, embedder)`` (``memlab.memory.bundle``: atomic,
versioned, checked on load); ``graph.to_graphml`` and ``graph.to_pyg`` export the whole graph,
categories and validity intervals included.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime
from typing import Any, Iterable

import numpy as np

from memlab.embed.base import Embedder
from memlab.embed.similarity import unit_rows
from memlab.memory.base import Memory
from memlab.memory.bundle import load_bundle, save_bundle
from memlab.memory.graph import MemoryGraph
from memlab.memory.store import MemoryStoreError, UnitMemory
from memlab.memory.structure import mean, share
from memlab.stages.describe import MAX_TAGS
from memlab.stages.global_select import HierarchyNode
from memlab.types import MemoryUnit

EPISODE, ENTITY, CATEGORY = "episode", "entity", "category"
FACT, EPISODIC, CHILD = "fact", "episodic", "category_child"
FORMAT = "memlab.Mnemis.Memory"
FORMAT_VERSION = 1
_PARTS = ("episodes", "entities", "names", "facts")
#: Two categories of a layer whose children sets overlap this much (Jaccard) are one group under
#: two names: the 1.5B model lists one run of names under several categories ("Pet", "Animal",
#: "Plant" ... over the same 20 entities), which no rule of section 2.2 refuses.
REPEATED_CHILDREN = 0.8


class MnemisMemory(Memory):
    """Base graph + hierarchy of one conversation (module docstring). State only: what to add
    is decided by the pipeline (``Mnemis.build``)."""

    def __init__(self, embedder: Embedder) -> None:
        self.graph = MemoryGraph()
        self.episodes = UnitMemory(embedder)
        self.entities = UnitMemory(embedder)
        self.names = UnitMemory(embedder)
        self.facts = UnitMemory(embedder)
        self.layers: list[list[str]] = []
        self.key_of: dict[str, str] = {}
        self.id_of: dict[str, str] = {}
        #: Counters of ingestion: entity mentions resolved onto an existing entity, facts found
        #: again, facts invalidated.
        self.counts: Counter[str] = Counter()

    # -- base graph ----------------------------------------------------------------------
    def add_episode(self, unit: MemoryUnit) -> None:
        self.episodes.add([unit])
        self.graph.add_node(unit.id, EPISODE, text=unit.text, timestamp=unit.timestamp, provenance=unit.source_ids)

    def resolve(self, name: str, threshold: float) -> str | None:
        """The existing entity ``name`` denotes (2.1's de-duplication): the same name up to case
        and spacing (full text), else the most similar name embedding at or above ``threshold``."""
        key = " ".join(name.split()).casefold()
        for entity_id in self.names.units:
            if self.names.get(entity_id).text.casefold() == key:
                return entity_id
        if not len(self.names):
            return None
        best = self.names.search_dense(name, k=1)
        return best[0].unit.id if best and best[0].score >= threshold else None

    def add_entities(self, names: list[str]) -> list[str]:
        """New entities, one per name (indexed by name now, by summary once described)."""
        ids = [f"entity:{len(self.names) + i}" for i in range(len(names))]
        for entity_id, name in zip(ids, names):
            self._key(entity_id, "E", ENTITY)
            self.graph.add_node(entity_id, ENTITY, text=name, name=name, summary="", tags=[], episodes=[])
        self.names.add([MemoryUnit(entity_id, name, (), kind="entity_name") for entity_id, name in zip(ids, names)])
        return ids

    def mention(self, entity_id: str, episode_id: str) -> None:
        """``entity_id`` appears in ``episode_id``: the episodic edge and ``episodes``."""
        node = self.graph.node(entity_id)
        if episode_id not in node["episodes"]:
            self.graph.set_attributes(entity_id, episodes=[*node["episodes"], episode_id])
            self.graph.add_provenance(entity_id, self.graph.provenance(episode_id))
            self.graph.add_edge(entity_id, episode_id, EPISODIC)

    def describe(self, descriptions: list[tuple[str, str, Iterable[str]]]) -> None:
        """``(entity id, summary, tags)`` of entities seen in an episode: kept (an empty summary
        keeps the old one; new tags go first, at most ``MAX_TAGS``) and indexed, in one batch."""
        for entity_id, summary, tags in descriptions:
            node = self.graph.node(entity_id)
            tags = list(dict.fromkeys([*tags, *node["tags"]]))[:MAX_TAGS]
            self.graph.set_attributes(entity_id, summary=summary or node["summary"], tags=tags)
            self.graph.add_node(entity_id, ENTITY, text=self.entity_text(entity_id))
        self.entities.add([MemoryUnit(entity_id, self.entity_text(entity_id), self.graph.provenance(entity_id),
                                      kind=ENTITY, attributes={"name": self.graph.node(entity_id)["name"]})
                           for entity_id in dict.fromkeys(e for e, _, _ in descriptions)])

    def add_fact(self, source: str, target: str, text: str, valid_at: datetime | None, episode_id: str) -> str:
        fact_id = f"fact:{len(self.facts)}"
        provenance = self.graph.provenance(episode_id)
        self.facts.add([MemoryUnit(fact_id, text, provenance, valid_at, FACT,
                                   attributes={"source": source, "target": target, "episode": episode_id})])
        self.graph.add_edge(source, target, FACT, label=fact_id, fact=text, valid_at=valid_at, invalid_at=None,
                            episodes=[episode_id])
        return fact_id

    def fact_edge(self, fact_id: str) -> dict:
        unit = self.facts.get(fact_id)
        source, target = unit.attributes["source"], unit.attributes["target"]
        for other, _, data in self.graph.neighbors(source, FACT, direction="both"):
            if data["label"] == fact_id and other == target:
                return data
        raise KeyError(f"no fact edge {fact_id!r}")

    def seen_again(self, fact_id: str, episode_id: str) -> None:
        """A duplicate of ``fact_id`` was found in ``episode_id`` (2.1's edge de-duplication)."""
        data = self.fact_edge(fact_id)
        self.graph.add_edge(data["src"], data["dst"], FACT, label=fact_id,
                            episodes=list(dict.fromkeys([*data["episodes"], episode_id])))
        self.counts["duplicate_facts"] += 1

    def invalidate(self, fact_id: str, at: datetime | None, by: str | None = None, quote: str = "") -> None:
        """Close ``fact_id``'s validity at ``at``, ended by the fact ``by`` whose words ``quote``
        contradict it (kept as it was when already closed)."""
        data = self.fact_edge(fact_id)
        if data["invalid_at"] is None:
            self.graph.add_edge(data["src"], data["dst"], FACT, label=fact_id, invalid_at=at,
                                invalidated_by=by or "", contradiction=quote)
            self.counts["invalidated_facts"] += 1

    def fact_ends(self, fact_id: str) -> tuple[str, str]:
        """The (source, target) entity ids of a fact."""
        attributes = self.facts.get(fact_id).attributes
        return attributes["source"], attributes["target"]

    def predicate(self, fact_id: str) -> str:
        """A fact's text less its two entities' names: what it says of them ("lives in")."""
        text = self.facts.get(fact_id).text
        for entity_id in self.fact_ends(fact_id):
            name = self.graph.node(entity_id)["name"]
            text = re.sub(re.escape(name), " ", text, flags=re.IGNORECASE)
        return " ".join(text.split()) or self.facts.get(fact_id).text

    def facts_of(self, entity_ids: Iterable[str]) -> list[str]:
        """Ids of the facts touching any of ``entity_ids``, in first-seen order."""
        found: dict[str, None] = {}
        for entity_id in entity_ids:
            for _, _, data in self.graph.neighbors(entity_id, FACT, direction="both"):
                found.setdefault(data["label"], None)
        return list(found)

    def episodes_of(self, entity_ids: Iterable[str]) -> list[str]:
        found: dict[str, None] = {}
        for entity_id in entity_ids:
            found.update(dict.fromkeys(self.graph.node(entity_id)["episodes"]))
        return list(found)

    # -- hierarchy -----------------------------------------------------------------------
    def clear_hierarchy(self) -> None:
        for category in self.graph.nodes(CATEGORY):
            self.graph.remove_node(category)
            del self.id_of[self.key_of.pop(category)]
        self.layers = []

    def add_category(self, name: str, layer: int, children: list[str]) -> str:
        """A category over ``children``; its tags (the children's most common) and summary
        (its children's names) are made in code: appendix D's prompt returns names only."""
        category_id = f"category:{len(self.graph.nodes(CATEGORY))}"
        names = [self.graph.node(child)["name"] for child in children]
        summary = f"{name}: " + ", ".join(names[:12]) + (" ..." if len(names) > 12 else "")
        self.graph.add_node(category_id, CATEGORY, text=summary, name=name, summary=summary, layer=layer,
                            tags=list(self.common_tags(children)))
        self._key(category_id, "C", CATEGORY)
        for child in children:
            self.graph.add_edge(category_id, child, CHILD)
        return category_id

    def common_tags(self, node_ids: Iterable[str]) -> tuple[str, ...]:
        """The most common tags of ``node_ids`` (at most ``MAX_TAGS``): a category's tags."""
        counts = Counter(tag for node_id in node_ids for tag in self.graph.node(node_id)["tags"])
        return tuple(tag for tag, _ in counts.most_common(MAX_TAGS))

    def node_vectors(self, node_ids: list[str]) -> np.ndarray:
        """An embedding per node, in order: an entity's indexed ``name: summary`` vector, a
        category's ``name [tags]: children`` embedded now (what batches of a layer are cut by)."""
        entities = [n for n in node_ids if self.graph.node_type(n) == ENTITY]
        others = [n for n in node_ids if self.graph.node_type(n) != ENTITY]
        vectors = dict(zip(entities, self.entities.vectors(entities))) if entities else {}
        if others:
            vectors.update(zip(others, self.entities.embedder.encode([self.node_line(n) for n in others])))
        return np.stack([vectors[n] for n in node_ids]) if node_ids else np.zeros((0, self.entities.embedder.dim),
                                                                                   dtype=np.float32)

    def children(self, node_id: str) -> list[str]:
        return [child for child, _, _ in self.graph.neighbors(node_id, CHILD, direction="out")]

    def descendants(self, node_id: str) -> list[str]:
        """Every node below ``node_id``, breadth first."""
        found: dict[str, None] = {}
        frontier = self.children(node_id)
        while frontier:
            fresh = [n for n in dict.fromkeys(frontier) if n not in found]
            found.update(dict.fromkeys(fresh))
            frontier = [child for n in fresh for child in self.children(n)]
        return list(found)

    def top_layer(self) -> list[str]:
        """Where global selection starts: the last layer, or every entity without a hierarchy."""
        return list(self.layers[-1]) if self.layers else list(self.entities.units)

    def hierarchy_node(self, node_id: str) -> HierarchyNode:
        node = self.graph.node(node_id)
        return HierarchyNode(self.key_of[node_id], node["name"], tuple(node["tags"]), node["summary"],
                             node.get("layer", 0))

    # -- reading -------------------------------------------------------------------------
    def node_type(self, node_id: str) -> str:
        return self.graph.node_type(node_id)

    def entity_text(self, entity_id: str) -> str:
        node = self.graph.node(entity_id)
        return f"{node['name']}: {node['summary']}" if node["summary"] else node["name"]

    def node_summary(self, node_id: str) -> str:
        """An entity's summary, a category's children (its summary less its name)."""
        node = self.graph.node(node_id)
        return node["summary"].partition(": ")[2] if node["type"] == CATEGORY else node["summary"]

    def node_line(self, node_id: str) -> str:
        """An entity or category as the answerer reads it: ``name [tags]: summary``."""
        node = self.graph.node(node_id)
        tags = f" [{', '.join(node['tags'])}]" if node["tags"] else ""
        summary = self.node_summary(node_id)
        return f"{node['name']}{tags}: {summary}" if summary else f"{node['name']}{tags}"

    def stats(self) -> dict[str, int]:
        layers = {f"layer_{i}_nodes": len(nodes) for i, nodes in enumerate(self.layers)}
        return {"episodes": len(self.episodes), "entities": len(self.entities), "facts": len(self.facts),
                "categories": self.graph.num_nodes(CATEGORY), "layers": max(len(self.layers) - 1, 0), **layers,
                "resolved_mentions": self.counts["resolved_mentions"],
                "duplicate_facts": self.counts["duplicate_facts"],
                "invalidated_facts": self.counts["invalidated_facts"]}

    def structure(self) -> dict[str, Any]:
        """The base graph's and the hierarchy's shape (``memlab.memory.structure``). What the paper
        implies (2.2): layers that shrink by about the compression ratio, categories that each
        group a part of the layer below (many-to-many), so that a top-down descent narrows the
        candidates, and most of a layer made of categories, not of nodes promoted because no
        category took them; fact validity closed only by a contradiction (2.1), so most facts
        stay valid."""
        layers = [[n for n in layer if self.graph.node_type(n) == CATEGORY and self.graph.node(n)["layer"] == i]
                  for i, layer in enumerate(self.layers[1:], start=1)]  # made at that layer, not promoted
        below = [len(layer) for layer in self.layers[:-1]]
        children = [[len(self.children(c)) for c in categories] for categories in layers]
        widest = [max(sizes, default=0) for sizes in children]
        largest = [share(w, n) for w, n in zip(widest, below)]
        facts = len(self.facts)
        found = {
            "episodes": len(self.episodes),
            "entities": len(self.entities),
            "facts": facts,
            "facts_closed": self.counts["invalidated_facts"],
            "invalidated_fact_share": share(self.counts["invalidated_facts"], facts),
            "rejected_invalidation_replies": self.counts["rejected_invalidation_replies"],
            "layers": len(layers),
            "layer_sizes": [len(layer) for layer in self.layers],
            "categories_per_layer": [len(categories) for categories in layers],
            "mean_children_per_category": [mean(sizes) for sizes in children],
            "largest_category_share_per_layer": largest,
            "largest_category_share": max((s for s in largest if s is not None), default=None),
            "rejected_category_replies": self.counts["rejected_category_replies"],
            "category_coherence_per_layer": [self.coherence(c, below_nodes) for c, below_nodes
                                             in zip(layers, self.layers[:-1])],
            "repeated_categories_per_layer": [self.repeated(categories) for categories in layers],
        }
        found["repeated_category_share"] = share(sum(found["repeated_categories_per_layer"]),
                                                 sum(found["categories_per_layer"]))
        # A node no category of its layer took is promoted as itself; an entity still in the top
        # layer was never categorised at all, so a descent can only reach it by its own name.
        promoted = [len(nodes) - len(made) for nodes, made in zip(self.layers[1:], layers)]
        found["promoted_per_layer"] = promoted
        found["promoted_share_per_layer"] = [share(p, len(nodes)) for p, nodes in zip(promoted, self.layers[1:])]
        top = self.layers[-1] if len(self.layers) > 1 else []
        found["uncategorised_entities"] = sum(self.graph.node_type(n) != CATEGORY for n in top)
        found["uncategorised_entity_share"] = share(found["uncategorised_entities"], len(self.entities))
        found["category_coherence"] = mean(c for c in found["category_coherence_per_layer"] if c is not None)
        problems = [f"layer {i}: one category holds {w} of the {n} nodes below it"
                    for i, (w, n) in enumerate(zip(widest, below), start=1) if n > 2 and w >= 0.9 * n]
        problems += [f"layer {i}: {r} of its {n} categories repeat another's children"
                     for i, (r, n) in enumerate(zip(found["repeated_categories_per_layer"],
                                                    found["categories_per_layer"]), start=1) if r and 2 * r >= n]
        problems += [f"layer {i}: {p} of its {len(nodes)} nodes are promoted uncategorised"
                     for i, (p, nodes) in enumerate(zip(promoted, self.layers[1:]), start=1)
                     if len(nodes) > 2 and 2 * p > len(nodes)]
        if facts >= 5 and found["invalidated_fact_share"] >= 0.5:
            problems.append(f"{found['invalidated_fact_share']:.0%} of facts are closed as contradicted")
        return {**found, "degenerate": problems}

    def repeated(self, categories: list[str]) -> int:
        """How many of ``categories`` have children that overlap those of an earlier one of them
        by ``REPEATED_CHILDREN`` or more (Jaccard): the same group under another name."""
        seen: list[set[str]] = []
        count = 0
        for category in categories:
            children = set(self.children(category))
            count += bool(children) and any(len(children & other) >= REPEATED_CHILDREN * len(children | other)
                                            for other in seen)
            seen.append(children)
        return count

    def coherence(self, categories: list[str], below: list[str]) -> float | None:
        """How much closer a category's children are to each other than two nodes of the layer
        below are on average: the mean over ``categories`` of their children's mean pairwise
        cosine, less the layer's (embeddings of ``node_vectors``). About 0 for groups drawn at
        random from the layer. Not a judgement of meaning: the prompted categorizer groups
        within batches packed from clusters of similar nodes, so even a count scores above 0
        (conv-26's first 4 sessions: 0.14 for nonsense categories, 0.22 for the LLM-free ones,
        which group by the same embeddings by construction). Reading the categories decides."""
        if len(below) < 2 or not categories:
            return None
        position = {node: i for i, node in enumerate(below)}
        unit = unit_rows(self.node_vectors(below))
        sims = unit @ unit.T

        def mean_pair(rows: list[int]) -> float:  # mean cosine over the distinct pairs of rows
            block = sims[np.ix_(rows, rows)]
            return float((block.sum() - np.trace(block)) / (len(rows) * (len(rows) - 1)))

        groups = [[position[c] for c in self.children(category) if c in position] for category in categories]
        within = [mean_pair(rows) for rows in groups if len(rows) >= 2]
        return float(np.mean(within)) - mean_pair(list(range(len(below)))) if within else None

    # -- saving --------------------------------------------------------------------------
    def save(self, folder) -> None:
        state = {"layers": self.layers, "key_of": self.key_of, "counts": dict(self.counts)}
        save_bundle(folder, format=FORMAT, format_version=FORMAT_VERSION, embedder=self.episodes.embedder,
                    parts={name: getattr(self, name) for name in _PARTS}, graph=self.graph, state=state)

    @classmethod
    def load(cls, folder, embedder: Embedder) -> "MnemisMemory":
        bundle = load_bundle(folder, format=FORMAT, format_version=FORMAT_VERSION, embedder=embedder)
        memory = cls(embedder)
        try:
            memory.graph = bundle.graph
            for name in _PARTS:
                setattr(memory, name, bundle.parts[name])
            memory.layers = [list(map(str, layer)) for layer in bundle.state["layers"]]
            memory.key_of = {str(k): str(v) for k, v in bundle.state["key_of"].items()}
            memory.counts = Counter({str(k): int(v) for k, v in bundle.state["counts"].items()})
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise MemoryStoreError(f"{folder}: not a Mnemis memory: {type(e).__name__}: {e}") from None
        memory.id_of = {key: node for node, key in memory.key_of.items()}
        missing = [n for n in memory.key_of if not memory.graph.has_node(n)]
        if missing or not set(memory.entities.units) <= set(memory.names.units):
            raise MemoryStoreError(f"{folder}: not a Mnemis memory: inconsistent nodes ({missing[:3]})")
        return memory

    # -- internals -----------------------------------------------------------------------
    def _key(self, node_id: str, prefix: str, type: str) -> None:
        key = f"{prefix}{sum(1 for k in self.key_of.values() if k.startswith(prefix))}"
        self.key_of[node_id] = key
        self.id_of[key] = node_id
