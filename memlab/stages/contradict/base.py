"""Contradict family: new facts and existing ones -> the existing facts they contradict
(Mnemis 2.1's fact invalidation: a contradicted edge's validity is closed, ``invalid_at``,
rather than the edge deleted; the pipeline does the closing).

Contract
--------
* ``ContradictOut.contradicted`` holds indexes into ``ContradictIn.existing``, no repeats,
  in increasing order. A fact that only adds to an existing one contradicts nothing.
* A failed call contradicts nothing, with ``error`` set (counted failure): a missed
  invalidation keeps an old fact valid, which is the safe side.
"""

from __future__ import annotations

from dataclasses import dataclass

from memlab.stage import Stage


@dataclass(frozen=True)
class ContradictIn:
    new: tuple[str, ...]
    existing: tuple[str, ...]


@dataclass(frozen=True)
class ContradictOut:
    contradicted: tuple[int, ...] = ()
    error: str | None = None


class ContradictionDetector(Stage[ContradictIn, ContradictOut]):
    """Base class of the contradict family (``In = ContradictIn``, ``Out = ContradictOut``)."""

    In = ContradictIn
    Out = ContradictOut
