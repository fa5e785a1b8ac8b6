"""Select family: candidate event nodes -> the starting nodes of the search (CompassMem 4.3.2,
"Localization", S_q = Psi_start(q, C_q)).

Candidates come in groups: one group for the dense top-k ("Memory Node Selection" prompt), or
one group per topic cluster ("Cluster-based Node Selection" prompt, at most ``per_group``
nodes from each).

Contract
--------
* ``selected`` holds keys of the given candidates only, no repeats, at most ``per_group`` from
  a group and ``limit`` in all, in the order chosen.
* A failed call falls back to the best-scored candidate of each group (``error`` set).
"""

from __future__ import annotations

from dataclasses import dataclass

from memlab.stage import Stage
from memlab.stages.event_view import EventView


@dataclass(frozen=True)
class Candidate:
    view: EventView
    #: Cosine similarity to the query.
    score: float


@dataclass(frozen=True)
class SelectIn:
    question: str
    groups: tuple[tuple[Candidate, ...], ...]
    subgoals: tuple[str, ...] = ()
    per_group: int = 5
    limit: int = 5


@dataclass(frozen=True)
class SelectOut:
    selected: tuple[str, ...]
    error: str | None = None


def checked_selection(keys: list[str], item: SelectIn) -> tuple[str, ...]:
    """``keys`` cut to the contract: known candidates, no repeats, the group and total limits."""
    group_of = {c.view.key: g for g, group in enumerate(item.groups) for c in group}
    taken: dict[int, int] = {}
    chosen: list[str] = []
    for key in keys:
        group = group_of.get(key)
        if group is None or key in chosen or taken.get(group, 0) >= item.per_group:
            continue
        taken[group] = taken.get(group, 0) + 1
        chosen.append(key)
        if len(chosen) >= item.limit:
            break
    return tuple(chosen)


def best_of_each_group(item: SelectIn) -> tuple[str, ...]:
    """The fallback selection: each group's best-scored candidate."""
    keys = [max(group, key=lambda c: c.score).view.key for group in item.groups if group]
    return checked_selection(keys, item)


class NodeSelector(Stage[SelectIn, SelectOut]):
    """Base class of the select family (``In = SelectIn``, ``Out = SelectOut``)."""

    In = SelectIn
    Out = SelectOut
