"""Consolidate family: a new event and its graph neighbourhood -> causal links (MAGMA 3.4).

The slow path of MAGMA's memory evolution (Algorithm 3) reads the 2-hop neighbourhood of a
newly ingested event and infers latent causal edges (Eq. 8). A causal edge is kept when its
score exceeds the threshold delta (3.2, "Causal Graph"). Entity links, the other edges the
slow path adds, come from the event's extracted entities (event family), not from here.

Contract
--------
* ``ConsolidateIn.event`` is the new event; ``neighbours`` are other events (id, text, time),
  nearest in the graph first.
* Every returned ``CausalLink`` involves the new event, links two distinct events of the
  input, has its cause no later than its effect (when both have times) and a score above
  the stage's threshold.
* A failed call yields no links and ``error`` set (counted failure); the worker goes on.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from memlab.stage import Stage


@dataclass(frozen=True)
class EventRef:
    id: str
    text: str
    timestamp: datetime | None = None


@dataclass(frozen=True)
class ConsolidateIn:
    event: EventRef
    neighbours: tuple[EventRef, ...]


@dataclass(frozen=True)
class CausalLink:
    cause: str
    effect: str
    score: float


@dataclass(frozen=True)
class ConsolidateOut:
    links: tuple[CausalLink, ...] = ()
    error: str | None = None


class Consolidator(Stage[ConsolidateIn, ConsolidateOut]):
    """Base class of the consolidate family (``In = ConsolidateIn``, ``Out = ConsolidateOut``)."""

    In = ConsolidateIn
    Out = ConsolidateOut
