"""Plan family: a query -> a retrieval plan (what to search each index view with, and how deep).

SimpleMem's intent-aware retrieval planning (section 2.3, eq. 4): ``{q_sem, q_lex, q_sym, d}``
from the query. ``semantic_query`` is for the dense view, ``lexical_keys`` for BM25, the
time range (and the lexical keys as entity names) for the symbolic view, and ``depth`` is
``n``, the candidate limit imposed on each view.

Contract every implementation honours
--------------------------------------
* ``depth`` is a positive int; ``semantic_query`` is never empty (the query itself when
  there is nothing better); ``start <= end`` when both are set (naive datetimes).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from memlab.stage import Stage

COMPLEXITY_LEVELS: tuple[str, ...] = ("LOW", "HIGH")


@dataclass(frozen=True)
class PlanIn:
    query: str
    #: When the query is asked, if known (resolves "last month" in the question).
    question_date: datetime | None = None


@dataclass(frozen=True)
class PlanOut:
    semantic_query: str
    lexical_keys: tuple[str, ...]
    depth: int
    complexity: str = "HIGH"
    start: datetime | None = None
    end: datetime | None = None
    rationale: str = ""
    error: str | None = None


class Planner(Stage[PlanIn, PlanOut]):
    """Base class of the plan family (``In = PlanIn``, ``Out = PlanOut``)."""

    In = PlanIn
    Out = PlanOut
