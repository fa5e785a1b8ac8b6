"""Filter family: a question and candidate texts -> the candidates to keep (EMem 3.3 / 3.4).

The output is the *positions* (0-based, ascending) of kept candidates: a binary indicator
f(q, c) per candidate. Implementations only ever keep given candidates; the EMem filter is
recall-oriented (borderline candidates are kept) and, when it cannot decide (unusable
output), keeps everything.
"""

from __future__ import annotations

from dataclasses import dataclass

from memlab.stage import Stage


@dataclass(frozen=True)
class FilterIn:
    question: str
    candidates: tuple[str, ...]


@dataclass(frozen=True)
class FilterOut:
    keep: tuple[int, ...]
    error: str | None = None


class RelevanceFilter(Stage[FilterIn, FilterOut]):
    """Base class of the filter family (``In = FilterIn``, ``Out = FilterOut``)."""

    In = FilterIn
    Out = FilterOut
