"""Fuse family: a new event and its most similar existing event -> merge, link or keep apart
(CompassMem 4.2, "Node Fusion & Expansion", appendix F.1's coreference prompt).

Contract
--------
* ``same_event``: the two describe one occurrence (the pipeline merges the new event into the
  existing node). ``has_overlap`` with a ``relation`` (one of ``RELATION_LABELS``): they are
  linked by an edge of that label. Neither: the new event is a node of its own.
* A failed call yields neither (the new event stays a separate node), ``error`` set.
"""

from __future__ import annotations

from dataclasses import dataclass

from memlab.stage import Stage
from memlab.stages.event_view import EventView


@dataclass(frozen=True)
class FuseIn:
    new: EventView
    existing: EventView
    #: Cosine similarity of the two events' embeddings.
    similarity: float = 0.0


@dataclass(frozen=True)
class FuseOut:
    same_event: bool = False
    has_overlap: bool = False
    relation: str | None = None
    reasoning: str = ""
    error: str | None = None

    @property
    def decision(self) -> str:
        """``merge``, ``link`` or ``new``."""
        if self.same_event:
            return "merge"
        return "link" if self.has_overlap and self.relation else "new"


class EventFuser(Stage[FuseIn, FuseOut]):
    """Base class of the fuse family (``In = FuseIn``, ``Out = FuseOut``)."""

    In = FuseIn
    Out = FuseOut
