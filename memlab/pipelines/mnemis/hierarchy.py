"""Mnemis's hierarchical graph ingestion (section 2.2), layer by layer over the entities.

At layer ``i`` the nodes of layer ``i - 1`` go to the ``categorizer`` (appendix D's prompt, or
an LLM-free one in the same slot) in batches of at most ``batch_size``, **cut by meaning**:
the nodes are clustered by their embeddings (an entity's ``name: summary``, a category's name,
tags and children) into clusters of at most ``cluster_size`` similar nodes, and whole clusters
are packed into batches (``balanced_groups``), so one concept's nodes meet in one batch rather
than wherever the order of extraction put them, and a batch holds several concepts to tell
apart (a batch of one concept alone is answered, rightly, with one category). Within a batch the nodes are listed in
an order unrelated to their meaning (a hash of the name), which is what lets the categorizer
tell a count (a run of consecutive indexes) from a group. Each batch sees the categories the
earlier batches made at this layer, with their tags, as its EXISTING CATEGORIES, so names are
reused rather than repeated. Then, in code, the paper's rules:

* **Many-to-many**: a node keeps every category it was put in.
* **Compression ratio** ``n``: a category with fewer than ``n`` children is dissolved; a node
  left in no category is *promoted*: it stands in layer ``i`` as itself.
* **Node-count reduction rule** (from layer 2): a layer with more nodes than the one below is
  discarded and the build stops there. A layer where nothing merged (no category survives)
  stops it too, as does reaching ``max_layers``.
* memlab's own stop: a layer of fewer than ``2 n`` nodes is the top. It cannot hold two
  categories of ``n`` children, and one category over all of it (a root) gives System-2's
  descent nothing to choose; so no category above it holds more than half of the layer.

``build_hierarchy`` replaces any earlier hierarchy (2.2: "we periodically rebuild the
hierarchical graph"; when is the pipeline's ``rebuild_every``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from memlab.memory.clustering import balanced_groups
from memlab.pipelines.mnemis.memory import MnemisMemory
from memlab.stages.categorize import CategorizeIn, Categorizer, NodeCard


@dataclass
class HierarchyReport:
    #: Why the build stopped, e.g. "max_layers", "reduction rule (layer 3: 40 > 31 nodes)".
    stopped: str = ""
    dissolved: int = 0
    promoted: list[int] = field(default_factory=list)
    #: Categorizer replies refused for breaking a grouping rule during this build.
    rejected_replies: int = 0


def build_hierarchy(memory: MnemisMemory, categorizer: Categorizer, *, ratio: int, max_layers: int,
                    batch_size: int, cluster_size: int | None = None) -> HierarchyReport:
    memory.clear_hierarchy()
    report = HierarchyReport()
    rejected_before = categorizer.rejected_replies
    try:
        _build_layers(memory, categorizer, report, ratio, max_layers, batch_size, cluster_size)
    finally:
        report.rejected_replies = categorizer.rejected_replies - rejected_before
    return report


def _build_layers(memory: MnemisMemory, categorizer: Categorizer, report: HierarchyReport, ratio: int,
                  max_layers: int, batch_size: int, cluster_size: int | None) -> None:
    below = list(memory.entities.units)
    if not below:
        report.stopped = "no entities"
        return
    memory.layers = [below]
    for layer in range(1, max_layers + 1):
        if len(below) < 2 * ratio:
            report.stopped = f"layer {layer - 1} has {len(below)} nodes, too few for two categories of {ratio}"
            return
        groups = categorize_layer(memory, categorizer, below, layer, batch_size, cluster_size)
        kept = {name: members for name, members in groups.items() if len(members) >= ratio}
        report.dissolved += len(groups) - len(kept)
        if not kept:
            report.stopped = f"nothing merged at layer {layer}"
            return
        grouped = {node for members in kept.values() for node in members}
        promoted = [node for node in below if node not in grouped]
        size = len(kept) + len(promoted)
        if layer >= 2 and size > len(below):
            report.stopped = f"reduction rule (layer {layer}: {size} > {len(below)} nodes)"
            return
        categories = [memory.add_category(name, layer, members) for name, members in kept.items()]
        below = categories + promoted
        memory.layers.append(below)
        report.promoted.append(len(promoted))
    report.stopped = "max_layers"


def categorize_layer(memory: MnemisMemory, categorizer: Categorizer, nodes: list[str], layer: int,
                     batch_size: int, cluster_size: int | None = None) -> dict[str, list[str]]:
    """Category name -> member node ids for one layer, batch by batch (module docstring)."""
    groups: dict[str, list[str]] = {}
    spelling: dict[str, str] = {}
    example = previous_example(memory, nodes)
    for rows in balanced_groups(memory.node_vectors(nodes), batch_size, cluster_size):
        batch = sorted((nodes[row] for row in rows), key=lambda node: _unrelated_order(memory, node))
        existing = tuple(NodeCard(spelling[key], memory.common_tags(members)) for key, members in groups.items())
        out = categorizer([CategorizeIn(layer, tuple(card(memory, n) for n in batch), existing, example)])[0]
        for category in out.categories:
            key = category.name.casefold()
            spelling.setdefault(key, category.name)
            members = groups.setdefault(key, [])
            members.extend(batch[i] for i in category.members if batch[i] not in members)
    return {spelling[key]: members for key, members in groups.items()}


def _unrelated_order(memory: MnemisMemory, node_id: str) -> str:
    """A listing order unrelated to meaning, the same on every run: a hash of the node's name."""
    return hashlib.sha1(f"{memory.graph.node(node_id)['name']}\0{node_id}".encode()).hexdigest()


def card(memory: MnemisMemory, node_id: str) -> NodeCard:
    node = memory.graph.node(node_id)
    return NodeCard(node["name"], tuple(node["tags"]), memory.node_summary(node_id))


def previous_example(memory: MnemisMemory, nodes: list[str], count: int = 3) -> str:
    """Appendix D's "Previous Layer categories example": a few categories of the layer below
    with some of their members ("" at layer 1, whose nodes are entities)."""
    lines = []
    for node_id in nodes:
        if memory.node_type(node_id) == "category" and len(lines) < count:
            names = [memory.graph.node(child)["name"] for child in memory.children(node_id)[:4]]
            lines.append(f"- {', '.join(names)} -> {memory.graph.node(node_id)['name']}")
    return "\n".join(lines)
