"""Global-select family: a question and the nodes of one level of the hierarchy -> the nodes
to descend into (Mnemis 2.3, System-2 "Global Selection"; appendix D's node selection prompt).

A node is a category (with its children below it) or an entity (the bottom of the descent).

Contract
--------
* ``GlobalSelectOut.selected`` names keys of the given nodes only, no repeats, in the order
  chosen. ``all_children`` is the prompt's ``get_all_children``: take every node below this one
  without asking again (only meaningful for a category).
* There is no top-k: the selection is "fully determined" by the selector (2.3).
* A failed call selects nothing, with ``error`` set (counted failure): System-2 then adds
  nothing for that question, as the paper's System-2 returns nothing for ~10% of queries.
"""

from __future__ import annotations

from dataclasses import dataclass

from memlab.stage import Stage


@dataclass(frozen=True)
class HierarchyNode:
    #: Short key the prompt shows as the node's "uuid" (``C4`` a category, ``E17`` an entity).
    key: str
    name: str
    tags: tuple[str, ...] = ()
    summary: str = ""
    #: 0 for an entity, the category's layer otherwise.
    layer: int = 0


@dataclass(frozen=True)
class GlobalSelectIn:
    question: str
    nodes: tuple[HierarchyNode, ...]


@dataclass(frozen=True)
class Selection:
    key: str
    all_children: bool = False


@dataclass(frozen=True)
class GlobalSelectOut:
    selected: tuple[Selection, ...] = ()
    error: str | None = None


def checked_selections(pairs: list[tuple[str, bool]], item: GlobalSelectIn) -> tuple[Selection, ...]:
    """``(key, all_children)`` pairs held to the contract: known keys, first mention wins."""
    known = {node.key for node in item.nodes}
    chosen: dict[str, Selection] = {}
    for key, all_children in pairs:
        key = str(key).strip()
        if key in known and key not in chosen:
            chosen[key] = Selection(key, bool(all_children))
    return tuple(chosen.values())


class GlobalSelector(Stage[GlobalSelectIn, GlobalSelectOut]):
    """Base class of the global-select family (``In = GlobalSelectIn``, ``Out = GlobalSelectOut``)."""

    In = GlobalSelectIn
    Out = GlobalSelectOut
