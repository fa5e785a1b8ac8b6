"""Mnemis's retrieval (section 2.3): System-1 similarity search, System-2 global selection,
and the per-type re-ranking of their union.

* **System-1** (``system1``): per type, cosine and BM25 fused by reciprocal rank
  (``UnitMemory.search_hybrid``), top ``k`` episodes, ``2k`` entities and ``2k`` facts.
* **System-2** (``global_selection``): from the top layer down, the ``selector`` picks nodes
  of the current level (one call per ``batch_size`` nodes; all of a level's batches go as one
  batch). A picked category's children form the next level, or, with ``get_all_children``,
  everything below it is taken at once; picked entities are kept. Then ``system2`` takes the
  kept entities' episodes (episodic edges), their facts, and the entities those facts link.
* **Union and re-ranking** (``ranked``): per type, the System-1 list then the System-2 items not
  in it, ordered by cosine to the question and cut to ``max_candidates``; a ``reranker`` (the
  rerank family standing in for the paper's Qwen3-Reranker-8B) orders them, one batch of the
  three types; without one the order stays (System-1 alone: the paper's RRF ranking). The
  answerer gets ``k`` episodes, ``2k`` entities (categories included) and ``2k`` facts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from memlab.dates import format_day
from memlab.pipelines.base import dated_text
from memlab.pipelines.mnemis.memory import CATEGORY, MnemisMemory
from memlab.stages.global_select import GlobalSelectIn, GlobalSelector
from memlab.stages.rerank import Reranker, RerankIn

#: The three kinds of memory item, each searched, re-ranked and budgeted on its own.
TYPES = ("episodes", "entities", "facts")


@dataclass
class Candidates:
    episodes: list[str] = field(default_factory=list)
    #: Entities and categories (the paper's "Entities (Categories)").
    entities: list[str] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)

    def of(self, kind: str) -> list[str]:
        return getattr(self, kind)


@dataclass
class Descent:
    """What global selection kept, and what it cost."""

    entities: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    calls: int = 0
    levels: int = 0
    errors: list[str] = field(default_factory=list)


def budget(kind: str, k: int) -> int:
    """Table 9's budgets: ``k`` episodes, ``2k`` entities (categories included), ``2k`` facts."""
    return k if kind == "episodes" else 2 * k


def system1(memory: MnemisMemory, question: str, k: int) -> Candidates:
    parts = {"episodes": memory.episodes, "entities": memory.entities, "facts": memory.facts}
    return Candidates(**{kind: [hit.unit.id for hit in part.search_hybrid(question, budget(kind, k))] if len(part)
                         else [] for kind, part in parts.items()})


def global_selection(memory: MnemisMemory, selector: GlobalSelector, question: str, batch_size: int,
                     max_levels: int = 16) -> Descent:
    descent = Descent()
    level = memory.top_layer()
    seen: set[str] = set(level)
    while level and descent.levels < max_levels:
        descent.levels += 1
        batches = [level[i:i + batch_size] for i in range(0, len(level), batch_size)]
        outs = selector([GlobalSelectIn(question, tuple(memory.hierarchy_node(n) for n in batch)) for batch in batches])
        descent.calls += len(batches)
        below: list[str] = []
        for out in outs:
            if out.error:
                descent.errors.append(out.error)
            for selection in out.selected:
                node = memory.id_of[selection.key]
                if memory.node_type(node) != CATEGORY:
                    _add(descent.entities, node)
                    continue
                _add(descent.categories, node)
                if selection.all_children:
                    for child in memory.descendants(node):
                        _add(descent.categories if memory.node_type(child) == CATEGORY else descent.entities, child)
                else:
                    below.extend(memory.children(node))
        level = [n for n in dict.fromkeys(below) if n not in seen]
        seen.update(level)
    return descent


def system2(memory: MnemisMemory, descent: Descent) -> Candidates:
    """The kept entities' episodes and facts, and the entities those facts link (2.3)."""
    facts = memory.facts_of(descent.entities)
    linked = [memory.facts.get(f).attributes[end] for f in facts for end in ("source", "target")]
    entities = list(dict.fromkeys([*descent.categories, *descent.entities, *linked]))
    return Candidates(memory.episodes_of(descent.entities), entities, facts)


def ranked(memory: MnemisMemory, question: str, first: Candidates, second: Candidates, k: int,
           reranker: Reranker | None, max_candidates: int, embedder) -> Candidates:
    """The union per type, re-ranked and cut to its budget (module docstring)."""
    query = embedder.encode_queries([question])[0]
    pools: dict[str, list[str]] = {}
    for kind in TYPES:
        extra = [i for i in dict.fromkeys(second.of(kind)) if i not in set(first.of(kind))]
        pools[kind] = (first.of(kind) + by_similarity(memory, kind, extra, query))[:max_candidates]
    if reranker is not None:
        kinds = [kind for kind in TYPES if pools[kind]]
        outs = reranker([RerankIn(question, tuple(item_text(memory, kind, i) for i in pools[kind])) for kind in kinds])
        for kind, out in zip(kinds, outs):
            if len(out.scores) == len(pools[kind]):
                order = np.argsort(-np.asarray(out.scores, dtype=np.float64), kind="stable")
                pools[kind] = [pools[kind][i] for i in order]
    return Candidates(**{kind: pools[kind][:budget(kind, k)] for kind in TYPES})


def by_similarity(memory: MnemisMemory, kind: str, ids: list[str], query: np.ndarray) -> list[str]:
    if not ids:
        return []
    vectors = np.stack([vector_of(memory, kind, i) for i in ids])
    order = np.argsort(-(vectors @ query), kind="stable")
    return [ids[i] for i in order]


def vector_of(memory: MnemisMemory, kind: str, item: str) -> np.ndarray:
    if kind == "entities" and memory.node_type(item) == CATEGORY:
        return memory.entities.embedder.encode([memory.graph.node(item)["text"]])[0]
    part = {"episodes": memory.episodes, "entities": memory.entities, "facts": memory.facts}[kind]
    return part.vectors([item])[0]


def item_text(memory: MnemisMemory, kind: str, item: str) -> str:
    """An item as the reranker and the answerer read it."""
    if kind == "episodes":
        return dated_text(memory.episodes.get(item))
    if kind == "entities":
        return memory.node_line(item)
    return fact_line(memory, item)


def fact_line(memory: MnemisMemory, fact_id: str) -> str:
    """``fact (7 May 2023 - now)``: the validity interval as the paper's Figure 5 shows it."""
    edge = memory.fact_edge(fact_id)
    start = format_day(edge["valid_at"]) if edge["valid_at"] else "?"
    end = format_day(edge["invalid_at"]) if edge["invalid_at"] else "now"
    return f"{edge['fact']} ({start} - {end})"


def context_text(memory: MnemisMemory, chosen: Candidates, kinds: tuple[str, ...]) -> str:
    """The unified memory context (2.3): one titled section per type in ``kinds``."""
    titles = {"episodes": "Episodes", "entities": "Entities", "facts": "Facts"}
    sections = []
    for kind in kinds:
        items = chosen.of(kind)
        if items:
            lines = [item_text(memory, kind, i) if kind == "episodes" else f"- {item_text(memory, kind, i)}"
                     for i in items]
            sections.append(f"{titles[kind]}:\n" + ("\n\n" if kind == "episodes" else "\n").join(lines))
    return "\n\n".join(sections)


def _add(found: list[str], node: str) -> None:
    if node not in found:
        found.append(node)

