"""Navigate family: the explorer's decision at one event node (CompassMem Eq. 9-10).

Given the question, the subgoals and which are satisfied, the evidence kept so far, the
current node and its typed neighbours, choose an action:

* ``SKIP``: the node is not kept; ``next_nodes`` may still name neighbours to visit.
* ``EXPAND``: the node is kept as evidence and exploration goes on from ``next_nodes``.
* ``ANSWER``: the node is kept and this explorer's path stops.

Contract
--------
* ``next_nodes`` are keys of the given neighbours only (at most ``max_next``, no repeats);
  ``satisfied`` are 0-based indices of subgoals the kept evidence + this node satisfy
  (always empty for ``SKIP``).
* A failed call yields ``EXPAND`` with no next nodes and nothing satisfied (the node was
  chosen as a start or by the queue, so it is kept; its path ends), ``error`` set.
"""

from __future__ import annotations

from dataclasses import dataclass

from memlab.stage import Stage
from memlab.stages.event_view import EventView

ACTIONS: tuple[str, ...] = ("SKIP", "EXPAND", "ANSWER")


@dataclass(frozen=True)
class Neighbour:
    view: EventView
    #: The relation label on the edge, as seen from the current node ("causal", "<- causal" ...).
    relation: str


@dataclass(frozen=True)
class NavigateIn:
    question: str
    subgoals: tuple[str, ...]
    satisfied: tuple[bool, ...]
    node: EventView
    neighbours: tuple[Neighbour, ...] = ()
    kept: tuple[EventView, ...] = ()
    max_next: int = 3

    def __post_init__(self) -> None:
        if len(self.subgoals) != len(self.satisfied):
            raise ValueError(f"NavigateIn: {len(self.subgoals)} subgoals but {len(self.satisfied)} satisfaction flags")


@dataclass(frozen=True)
class NavigateOut:
    action: str
    next_nodes: tuple[str, ...] = ()
    satisfied: tuple[int, ...] = ()
    reasoning: str = ""
    error: str | None = None

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"NavigateOut: action must be one of {ACTIONS}, got {self.action!r}")

    @property
    def keeps(self) -> bool:
        return self.action != "SKIP"


def checked_decision(action: str, next_nodes: list[str], satisfied: list[int], item: NavigateIn,
                     reasoning: str = "") -> NavigateOut:
    """A decision cut to the contract (unknown neighbours, repeats and out-of-range subgoals dropped)."""
    known = {n.view.key for n in item.neighbours}
    nodes = tuple(dict.fromkeys(k for k in next_nodes if k in known))[: item.max_next]
    goals = () if action == "SKIP" else tuple(sorted({i for i in satisfied if 0 <= i < len(item.subgoals)}))
    return NavigateOut(action, nodes, goals, reasoning)


class Navigator(Stage[NavigateIn, NavigateOut]):
    """Base class of the navigate family (``In = NavigateIn``, ``Out = NavigateOut``)."""

    In = NavigateIn
    Out = NavigateOut
