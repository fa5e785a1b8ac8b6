"""Categorize family: the nodes of one layer -> categories grouping them (Mnemis 2.2, the
hierarchical graph; appendix D's category prompt).

Contract
--------
* ``CategorizeIn.nodes`` are the nodes to group, each with its name, tags and summary; a ``Category``
  names its members by index into ``nodes``. ``existing`` are categories already made at this
  layer (from earlier batches), to be reused by name.
* Many-to-many: a node may be in several categories. Each category has a non-empty name and
  at least one valid member, no repeats; categories with the same (case-folded) name are one.
* ``nodes`` are listed in an order unrelated to their meaning (the pipeline's), so a category
  whose members are a run of consecutive indexes is a count, not a group.
* A grouping that breaks a rule of section 2.2 or appendix D (``broken_rules``: a category over
  more than ``MAX_CATEGORY_SHARE`` of the nodes, a count, a name joined by "and") is not an
  answer: a prompted categorizer refuses it (``RuleBrokenError``), retries once naming the rule
  and counts it in ``rejected_replies``; what is left after a second refusal is the reply less
  the categories that broke a rule.
* The rules that shape the hierarchy across batches (the compression ratio, promotion of nodes
  left out, the node-count reduction rule) are the pipeline's (``mnemis_hierarchy``).
* A failed call yields no categories with ``error`` set (counted failure); the pipeline then
  promotes the batch's nodes unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memlab.stage import Stage

#: Section 2.2, Minimum Concept Abstraction: a category captures what *its* children share,
#: "specific enough to be informative". One over more than this share of the nodes it was
#: given (the 1.5B model's "Family" = nodes 0-39 of 40) says nothing about any of them.
MAX_CATEGORY_SHARE = 0.5
#: The share rule applies from this many nodes on (of 3 nodes, 2 may well share a concept).
RULED_BATCH = 4
#: A category of at least this many members that are consecutive indexes is a count.
COUNT_RUN = 5
#: Appendix D: "The category name MUST NOT include the word 'and'" ("Food and Drinks").
_AND = re.compile(r"\band\b|&", re.IGNORECASE)


@dataclass(frozen=True)
class NodeCard:
    name: str
    tags: tuple[str, ...] = ()
    #: What the node is: an entity's summary, a category's children (appendix D's prompt shows
    #: names and tags only; a categorizer that embeds the nodes reads it).
    summary: str = ""


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


def broken_rules(categories: tuple[Category, ...], n_nodes: int,
                 max_share: float = MAX_CATEGORY_SHARE) -> list[tuple[Category, str]]:
    """Each category that breaks a grouping rule, with the rule in words (empty: none does)."""
    broken = []
    for category in categories:
        members = category.members
        if n_nodes >= RULED_BATCH and len(members) > max_share * n_nodes:
            broken.append((category, f"category {category.name!r} holds {len(members)} of the {n_nodes} nodes; "
                                     f"a category groups only the nodes that share a specific concept, "
                                     f"at most {max_share:.0%} of them"))
        elif len(members) >= COUNT_RUN and list(members) == list(range(members[0], members[0] + len(members))):
            broken.append((category, f"category {category.name!r} lists nodes {members[0]} to {members[-1]} in "
                                     f"order, which is counting, not grouping by meaning"))
        elif _AND.search(category.name):
            broken.append((category, f"category name {category.name!r} joins two concepts with 'and'"))
    return broken


class Categorizer(Stage[CategorizeIn, CategorizeOut]):
    """Base class of the categorize family (``In = CategorizeIn``, ``Out = CategorizeOut``)."""

    In = CategorizeIn
    Out = CategorizeOut
