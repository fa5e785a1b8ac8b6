"""What formed in a built memory: the helpers of the ``structure`` block every memory reports.

A memory's ``structure()`` describes its own shape from the memory alone, with no model call:
counts and shares under plain names (``cross_session_edge_share``, ``mean_turns_per_event``,
``causal_edges`` ...), and ``degenerate``, the reasons the structure that defines the system did
not form (empty when it did). ``Pipeline.memory_structure`` puts it in
``metrics.json["memory"][conversation]["structure"]``; ``memlab report`` shows it and flags a
degenerate memory. Shares are in [0, 1], None where their denominator is 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from memlab.types import MemoryUnit

#: How a unit's turns were found (``MemoryUnit.attributes["provenance"]``): named by the stage
#: that made it (a model's citation, a trained segmenter's span, a rule), guessed from word
#: overlap, or filled in for turns no unit claimed. A unit without the attribute was made from
#: its turns by construction (a turn, a chunk): stated.
STATED, GUESSED, FILLED = "stated", "guessed", "filled"


def share(part: float, whole: float) -> float | None:
    return part / whole if whole else None


def mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


def provenance_of(unit: MemoryUnit) -> str:
    return unit.attributes.get("provenance", STATED)


def span_structure(units: Sequence[MemoryUnit], noun: str) -> dict[str, Any]:
    """Units as spans of turns: how many, their mean turns, the share of single turns, and
    how their turns were found (``cited_provenance_share``: stated by the stage that made them;
    ``guessed_provenance_share``, ``filled_provenance_share``; ``attached_turn_share``: of all
    their turns, those joined to a stated unit without being cited, ``attributes["attached_turns"]``)."""
    provenance = [provenance_of(u) for u in units]
    turns = sum(len(u.source_ids) for u in units)
    return {
        f"{noun}s": len(units),
        f"mean_turns_per_{noun}": mean(len(u.source_ids) for u in units),
        f"single_turn_{noun}_share": share(sum(len(u.source_ids) == 1 for u in units), len(units)),
        "cited_provenance_share": share(provenance.count(STATED), len(units)),
        "guessed_provenance_share": share(provenance.count(GUESSED), len(units)),
        "filled_provenance_share": share(provenance.count(FILLED), len(units)),
        "attached_turn_share": share(sum(len(u.attributes.get("attached_turns", ())) for u in units), turns),
        "sessions": len({u.session for u in units} - {None}),
    }


def cross_session_share(edges: Iterable[tuple[str, str]], session: dict[str, str | None]) -> tuple[int, float | None]:
    """(edges whose two ends were made in different sessions, their share of ``edges``)."""
    edges = list(edges)
    crossing = sum(1 for u, v in edges if session.get(u) != session.get(v))
    return crossing, share(crossing, len(edges))
