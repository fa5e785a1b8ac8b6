"""Entity family: an episode -> the entities it names (Mnemis 2.1, base-graph ingestion).

An entity is "any concrete person, organization, place, object, event, or well-defined
concept". The extraction reads the current episode with recent episodes as context.

Contract
--------
* ``EntityIn.found`` empty: extract. ``found`` given: the *reflection* pass, which returns
  only names missing from ``found`` (the pipeline adds them), so one family serves both passes
  and a distilled model can learn either.
* Every returned name is grounded in the episode itself (``extraction.named_in``; a name only
  the context uses would link the entity to an episode that does not mention it), without
  repeats, and none of ``found``.
* A failed call yields no names with ``error`` set (counted failure).
"""

from __future__ import annotations

from dataclasses import dataclass

from memlab.stage import Stage


@dataclass(frozen=True)
class EntityIn:
    #: The current episode, one ``Speaker: text`` line per turn.
    episode: str
    #: Recent episodes, oldest first (context only).
    context: tuple[str, ...] = ()
    #: Names already extracted (the reflection pass); empty for the first pass.
    found: tuple[str, ...] = ()


@dataclass(frozen=True)
class EntityOut:
    names: tuple[str, ...] = ()
    error: str | None = None


class EntityExtractor(Stage[EntityIn, EntityOut]):
    """Base class of the entity family (``In = EntityIn``, ``Out = EntityOut``)."""

    In = EntityIn
    Out = EntityOut
