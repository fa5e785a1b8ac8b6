"""Reading a saved Mnemis memory by hand: the closed facts and the category memberships, listed
for labelling (``memlab.eval.hand_check`` scores the labelled lists), and the hierarchy made
again by another categorizer over the same entities.

A closing is right when the new fact, as the conversation says it, makes the old fact no longer
true at the new fact's date (a move ends "lives in", a break-up ends "is dating", a cancelled
plan ends "plans to"); it is wrong when both can be true together (a topic neighbour, an
addition, a restatement) or when the new fact does not say what the quote claims. A membership
is right when the category's name says something true and specific of the child as its summary
describes it ("Pets" over "Oliver: Melanie's cat"), wrong when it does not ("Pets" over
"Pottery class") or says nothing of it ("Things"). The checker reads the facts, the quotes and,
when in doubt, the episodes; never the questions or their answers.
"""

from __future__ import annotations

import random
from typing import Any

from memlab.pipelines.mnemis.memory import CATEGORY, MnemisMemory


def closings(memory: MnemisMemory) -> list[dict[str, Any]]:
    """Every closed fact with the fact that closed it and the quoted words, in fact order, each
    with ``"label": None`` to fill in."""
    found = []
    for fact_id in memory.facts.units:
        edge = memory.fact_edge(fact_id)
        if edge["invalid_at"] is None:
            continue
        by = edge.get("invalidated_by") or None
        found.append({
            "fact": fact_id, "old": memory.facts.get(fact_id).text, "old_valid_at": str(edge["valid_at"]),
            "closed_at": str(edge["invalid_at"]), "new": memory.facts.get(by).text if by else None,
            "quote": edge.get("contradiction", ""),
            "new_episode": memory.facts.get(by).attributes["episode"] if by else None, "label": None})
    return found


def memberships(memory: MnemisMemory, sample: int, seed: int = 0) -> list[dict[str, Any]]:
    """``sample`` (category, child) pairs drawn at random from every layer, in layer order, each
    with ``"label": None`` to fill in."""
    pairs = [(memory.graph.node(c)["layer"], c, child) for c in memory.graph.nodes(CATEGORY)
             for child in memory.children(c)]
    chosen = sorted(random.Random(seed).sample(pairs, min(sample, len(pairs))), key=lambda p: (p[0], p[1], p[2]))
    return [{"layer": layer, "category": memory.node_line(category), "child": memory.node_line(child), "label": None}
            for layer, category, child in chosen]


def layers_text(memory: MnemisMemory, shown: int = 8) -> str:
    """Each layer's categories with their first ``shown`` children, and its promoted nodes' count."""
    lines = []
    for number, layer in enumerate(memory.layers[1:], start=1):
        categories = [n for n in layer if memory.node_type(n) == CATEGORY and memory.graph.node(n)["layer"] == number]
        lines.append(f"layer {number}: {len(categories)} categories, {len(layer) - len(categories)} promoted")
        for category in categories:
            children = [memory.graph.node(c)["name"] for c in memory.children(category)]
            more = f", ... ({len(children)})" if len(children) > shown else ""
            lines.append(f"  {memory.graph.node(category)['name']}: {', '.join(children[:shown])}{more}")
    return "\n".join(lines)


def remake_hierarchy(memory: MnemisMemory, pipeline: Any) -> dict[str, Any]:
    """The hierarchy of ``memory`` made again with ``pipeline``'s categorizer, ``compression_ratio``,
    ``max_layers`` and ``category_batch`` (the base graph as saved: no extraction call), so
    categorizers compare on the same entities; returns the memory's structure block."""
    if pipeline.categorizer is None:
        raise ValueError("the pipeline has no categorizer (system2 is off)")
    memory.counts["rejected_category_replies"] = 0
    pipeline.build_hierarchy(memory)
    return pipeline.memory_structure(memory)
