"""Categorize family: the nodes of one layer -> categories grouping them (Mnemis 2.2, the
hierarchical graph; appendix D's category prompt).

Contract
--------
* ``CategorizeIn.nodes`` are the nodes to group, each with its name and tags; a ``Category``
  names its members by index into ``nodes``. ``existing`` are categories already made at this
  layer (from earlier batches), to be reused by name.
* Many-to-many: a node may be in several categories. Each category has a non-empty name and
  at least one valid member, no repeats; categories with the same (case-folded) name are one.
* The rules that shape the hierarchy (the compression ratio, promotion of nodes left out, the
  node-count reduction rule) are the pipeline's (``mnemis_hierarchy``), not the stage's.
* A failed call yields no categories with ``error`` set (counted failure); the pipeline then
  promotes the batch's nodes unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from memlab.stage import Stage


@dataclass(frozen=True)
class NodeCard:
    name: str
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class CategorizeIn:
    #: The layer being built: 1 groups entities, 2 groups layer-1 categories ...
    layer: int
    nodes: tuple[NodeCard, ...]
    existing: tuple[NodeCard, ...] = ()
    #: A few categories of the layer below with their members (appendix D's {prev_example}).
    previous_example: str = ""


@dataclass(frozen=True)
class Category:
    name: str
    members: tuple[int, ...]


@dataclass(frozen=True)
class CategorizeOut:
    categories: tuple[Category, ...] = ()
    error: str | None = None


def merged_categories(pairs: list[tuple[str, list[int]]], n_nodes: int) -> tuple[Category, ...]:
    """Categories from (name, member indexes) pairs held to the contract: members in range and
    without repeats, empty ones dropped, same-named ones merged (first spelling kept)."""
    members: dict[str, list[int]] = {}
    names: dict[str, str] = {}
    for name, indexes in pairs:
        name = " ".join(str(name).split())
        if not name:
            continue
        key = name.casefold()
        names.setdefault(key, name)
        bucket = members.setdefault(key, [])
        bucket.extend(i for i in indexes if isinstance(i, int) and 0 <= i < n_nodes and i not in bucket)
    return tuple(Category(names[key], tuple(found)) for key, found in members.items() if found)


class Categorizer(Stage[CategorizeIn, CategorizeOut]):
    """Base class of the categorize family (``In = CategorizeIn``, ``Out = CategorizeOut``)."""

    In = CategorizeIn
    Out = CategorizeOut
