"""Event family: one utterance -> the structured metadata of the event it records (MAGMA 3.2).

An event node is ``<content, timestamp, embedding, attributes>`` (Eq. 3); this family fills
the attributes: entities, topic, relationships, atomic facts, the dates mentioned and a
one-sentence summary (appendix C.1's target schema).

Contract
--------
* ``EventIn.reference`` is when the utterance was said; ``dates_mentioned`` in the output
  are resolved against it in code (rule temporal normaliser): each is the absolute form
  when it can be resolved, the original string otherwise.
* Extracted entities are checked against the utterance: an entity that appears neither in
  the text nor among ``EventIn.participants`` is dropped (small models invent names).
* A call that fails yields an empty ``EventOut`` with ``error`` set (counted failure).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime

from memlab.stage import Stage


@dataclass(frozen=True)
class EventIn:
    speaker: str
    text: str
    #: Summary of the previous event (C.1's {prev_summary}); "" for the first one.
    prev_summary: str = ""
    reference: datetime | date | None = None
    participants: tuple[str, ...] = ()


@dataclass(frozen=True)
class EventOut:
    entities: tuple[str, ...] = ()
    topic: str = ""
    relationships: tuple[str, ...] = ()
    semantic_facts: tuple[str, ...] = ()
    dates_mentioned: tuple[str, ...] = ()
    summary: str = ""
    error: str | None = None

    def attributes(self) -> dict[str, object]:
        """The event node's attribute set A_i."""
        return {
            "entities": list(self.entities),
            "topic": self.topic,
            "relationships": list(self.relationships),
            "semantic_facts": list(self.semantic_facts),
            "dates_mentioned": list(self.dates_mentioned),
            "summary": self.summary,
        }


class EventExtractor(Stage[EventIn, EventOut]):
    """Base class of the event family (``In = EventIn``, ``Out = EventOut``)."""

    In = EventIn
    Out = EventOut
