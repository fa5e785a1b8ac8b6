"""What the CompassMem stages see of an event node: ``EventView``.

The relation extractor, the fuser, the start-node selector and the explorer all read event
nodes in the same few fields, so the view is declared once here. ``key`` is the short id a
prompt shows and a model writes back (``N12``); the pipeline maps it to the memory's node id,
so no unit id (which embeds the conversation's opaque id) has to be echoed by a small model.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from memlab.dates import format_day


@dataclass(frozen=True)
class EventView:
    key: str
    summary: str
    #: The turns the event was made from (its provenance).
    source_ids: tuple[str, ...] = ()
    participants: tuple[str, ...] = ()
    #: When the event's session took place (tau of Eq. 4; relative dates in ``summary`` are
    #: already resolved against it in code).
    date: datetime | None = None

    def describe(self) -> str:
        """One line for a prompt: ``N12 [7 May 2023] (Caroline, Melanie) summary``."""
        parts = [self.key]
        if self.date is not None:
            parts.append(f"[{format_day(self.date)}]")
        if self.participants:
            parts.append(f"({', '.join(self.participants)})")
        parts.append(self.summary)
        return " ".join(parts)
