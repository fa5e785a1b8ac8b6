"""Subgoal family: a question -> 2-5 subgoals the search must cover (CompassMem Eq. 7).

Contract: ``subgoals`` is never empty (a failed call falls back to the question itself as the
one subgoal, ``error`` set); each is a short, distinct information need.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from memlab.stage import Stage


@dataclass(frozen=True)
class SubgoalIn:
    question: str
    question_date: datetime | None = None


@dataclass(frozen=True)
class SubgoalOut:
    subgoals: tuple[str, ...]
    error: str | None = None


class SubgoalPlanner(Stage[SubgoalIn, SubgoalOut]):
    """Base class of the subgoal family (``In = SubgoalIn``, ``Out = SubgoalOut``)."""

    In = SubgoalIn
    Out = SubgoalOut
