"""Synthesize family: the fresh memory units of one session -> the entries to commit.

SimpleMem's online semantic synthesis (section 2.2): before a session's units are written
to memory, related fragments are merged into consolidated entries ("wants coffee" +
"prefers oat milk" + "likes it hot" -> "prefers hot coffee with oat milk"), and
higher-level abstract representations are kept alongside the units they summarise (the
answer prompt of appendix A.3 reads both).

Contract every implementation honours
--------------------------------------
* ``SynthesizeIn`` holds one session's units, in extraction order.
* ``SynthesizeOut.units`` are the detailed entries to commit: every input unit is either
  passed through or merged into exactly one consolidated entry, whose ``source_ids`` is the
  union of its fragments' (first-seen order) and whose ``attributes["merged_from"]`` lists
  the fragment ids. No provenance is lost.
* ``SynthesizeOut.abstracts`` are ``kind="abstract"`` units; ``attributes["summarises"]``
  names the entries they abstract, and their ``source_ids`` are the union of those entries'.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from memlab.stage import Stage
from memlab.stages.compress.base import SALIENCE_LEVELS
from memlab.types import MemoryUnit


@dataclass(frozen=True)
class SynthesizeIn:
    conversation_id: str
    session_id: str
    session_time: datetime | None
    units: tuple[MemoryUnit, ...]


@dataclass(frozen=True)
class SynthesizeOut:
    units: tuple[MemoryUnit, ...]
    abstracts: tuple[MemoryUnit, ...] = ()
    error: str | None = None


class Synthesizer(Stage[SynthesizeIn, SynthesizeOut]):
    """Base class of the synthesize family (``In = SynthesizeIn``, ``Out = SynthesizeOut``)."""

    In = SynthesizeIn
    Out = SynthesizeOut


def union_ids(units: list[MemoryUnit] | tuple[MemoryUnit, ...]) -> tuple[str, ...]:
    """The union of the units' source ids, in first-seen order."""
    return tuple(dict.fromkeys(i for unit in units for i in unit.source_ids))


def merged_unit(unit_id: str, text: str, fragments: list[MemoryUnit] | tuple[MemoryUnit, ...], kind: str = "unit") -> MemoryUnit:
    """A unit made from ``fragments``: union of provenance and entities, earliest timestamp,
    highest salience, the first fragment's topic and session."""
    entities = list(dict.fromkeys(e for f in fragments for e in f.attributes.get("entities", [])))
    times = [f.timestamp for f in fragments if f.timestamp is not None]
    levels = [f.attributes.get("salience") for f in fragments if f.attributes.get("salience") in SALIENCE_LEVELS]
    first = fragments[0]
    return MemoryUnit(
        id=unit_id,
        text=text,
        source_ids=union_ids(fragments),
        timestamp=min(times) if times else None,
        kind=kind,
        speaker=first.speaker if all(f.speaker == first.speaker for f in fragments) else None,
        attributes={
            "session": first.attributes.get("session"),
            "entities": entities,
            "topic": first.attributes.get("topic", ""),
            "salience": min(levels, key=SALIENCE_LEVELS.index) if levels else "medium",
        },
    )
