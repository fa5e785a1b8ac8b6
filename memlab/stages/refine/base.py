"""Refine family: gap-aware query refinement (CompassMem Eq. 8): the question, its subgoals,
which are satisfied and what the search has collected -> a new query aimed at the unsatisfied ones.

Contract: ``query`` is never empty (a failed call falls back to the unsatisfied subgoals
joined, else the question; ``error`` set); ``targets`` are 0-based subgoal indices.
"""

from __future__ import annotations

from dataclasses import dataclass

from memlab.stage import Stage


@dataclass(frozen=True)
class RefineIn:
    question: str
    subgoals: tuple[str, ...]
    satisfied: tuple[bool, ...]
    #: The texts of the nodes the search kept so far (F.2's "information collected so far").
    collected: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(self.subgoals) != len(self.satisfied):
            raise ValueError(f"RefineIn: {len(self.subgoals)} subgoals but {len(self.satisfied)} satisfaction flags")


@dataclass(frozen=True)
class RefineOut:
    query: str
    targets: tuple[int, ...] = ()
    error: str | None = None


def fallback_query(item: RefineIn) -> str:
    """The unsatisfied subgoals joined (the question when all are satisfied)."""
    open_goals = [goal for goal, done in zip(item.subgoals, item.satisfied) if not done]
    return " ".join(open_goals) or item.question


class QueryRefiner(Stage[RefineIn, RefineOut]):
    """Base class of the refine family (``In = RefineIn``, ``Out = RefineOut``)."""

    In = RefineIn
    Out = RefineOut
