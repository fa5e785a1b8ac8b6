"""Fact family: an episode and its entities -> facts that link two entities (Mnemis 2.1's
edges: "a verifiable statement describing a meaningful relationship, action, or state
involving one or more specified entities within a defined temporal or contextual scope").

Contract
--------
* ``FactIn.found`` empty: extract. ``found`` given: the *reflection* pass, which returns only
  facts missing from ``found`` (the pipeline adds them).
* Each ``Fact`` links two of ``FactIn.entities`` (``source`` and ``target`` spelled as given;
  equal for a fact about one entity), its ``text`` is one sentence.
* Dates are resolved in code, not by the model: a prompted extractor given a temporal
  normaliser writes each relative time expression's absolute value beside it, and a fact with
  exactly one time expression gets ``valid_at``, the day that expression starts; otherwise
  ``valid_at`` is None and the pipeline uses the episode's date.
* A failed call yields no facts with ``error`` set (counted failure).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime

from memlab.stage import Stage


@dataclass(frozen=True)
class Fact:
    source: str
    target: str
    text: str
    valid_at: date | None = None


@dataclass(frozen=True)
class FactIn:
    episode: str
    entities: tuple[str, ...]
    context: tuple[str, ...] = ()
    #: Facts already extracted (the reflection pass); empty for the first pass.
    found: tuple[Fact, ...] = ()
    #: When the episode was said (resolves relative dates).
    reference: datetime | date | None = None


@dataclass(frozen=True)
class FactOut:
    facts: tuple[Fact, ...] = ()
    error: str | None = None


class FactExtractor(Stage[FactIn, FactOut]):
    """Base class of the fact family (``In = FactIn``, ``Out = FactOut``)."""

    In = FactIn
    Out = FactOut
