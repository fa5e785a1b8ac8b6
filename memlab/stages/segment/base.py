"""Segment family: one session of a conversation -> the memory units made from it.

Every unit keeps ``source_ids``, the ids of the turns it was made from, whatever the
segmenter (a turn, a token chunk, an LLM-extracted event).
"""

from __future__ import annotations

from dataclasses import dataclass

from memlab.stage import Stage
from memlab.types import MemoryUnit, Session


@dataclass(frozen=True)
class SegmentIn:
    conversation_id: str
    session: Session


@dataclass(frozen=True)
class SegmentOut:
    units: tuple[MemoryUnit, ...]
    error: str | None = None


class Segmenter(Stage[SegmentIn, SegmentOut]):
    """Base class of the segment family (``In = SegmentIn``, ``Out = SegmentOut``)."""

    In = SegmentIn
    Out = SegmentOut
