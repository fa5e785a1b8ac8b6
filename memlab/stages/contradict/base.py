"""Contradict family: new facts and existing ones -> the existing facts they contradict
(Mnemis 2.1's fact invalidation: a contradicted edge's validity is closed, ``invalid_at``,
rather than the edge deleted; the pipeline does the closing).

Contract
--------
* ``ContradictOut.closings`` says which new fact contradicts which existing one and quotes the
  words of the new fact that do (``Closing``): a closing without its reason cannot be checked,
  by a reader or by code. No existing fact is closed twice; ``contradicted`` lists the closed
  ones in increasing order. A fact that only adds to an existing one contradicts nothing.
* Rules (``broken_rules``): a quote is at least ``MIN_QUOTE_WORDS`` words found in its new fact;
  a reply that closes every one of several existing facts shown is not a judgement of each (the
  1.5B model named every fact shown in 40 of 51 calls of a conv-26 build). A prompted detector
  refuses such a reply (``RuleBrokenError``), retries once naming the rule and counts it in
  ``rejected_replies``; what is left after a second refusal is the closings that keep the
  rules, and nothing for a reply that closed everything.
* A failed call contradicts nothing, with ``error`` set (counted failure): a missed
  invalidation keeps an old fact valid, which is the safe side.
"""

from __future__ import annotations

from dataclasses import dataclass

from memlab.stage import Stage

MIN_QUOTE_WORDS = 2


@dataclass(frozen=True)
class ContradictIn:
    new: tuple[str, ...]
    existing: tuple[str, ...]


@dataclass(frozen=True)
class Closing:
    #: Index into ``ContradictIn.existing``: the fact no longer true.
    existing: int
    #: Index into ``ContradictIn.new``: the fact that ends it.
    new: int
    #: The words of the new fact that contradict the existing one.
    quote: str


@dataclass(frozen=True)
class ContradictOut:
    closings: tuple[Closing, ...] = ()
    error: str | None = None

    @property
    def contradicted(self) -> tuple[int, ...]:
        return tuple(sorted({closing.existing for closing in self.closings}))


def _words(text: str) -> list[str]:
    return "".join(c.casefold() if c.isalnum() else " " for c in text).split()


def quoted_in(quote: str, text: str) -> bool:
    """``quote`` is a run of at least ``MIN_QUOTE_WORDS`` words of ``text`` (case and punctuation aside)."""
    words, within = _words(quote), _words(text)
    n = len(words)
    return n >= MIN_QUOTE_WORDS and any(within[i:i + n] == words for i in range(len(within) - n + 1))


def broken_rules(item: ContradictIn, closings: tuple[Closing, ...]) -> list[tuple[Closing | None, str]]:
    """Each closing that breaks a rule with the rule in words, and ``(None, rule)`` for a rule the
    reply as a whole breaks (closing every one of several facts shown)."""
    broken: list[tuple[Closing | None, str]] = []
    for closing in closings:
        if not quoted_in(closing.quote, item.new[closing.new]):
            broken.append((closing, f"the reason {closing.quote!r} for closing existing fact {closing.existing + 1} "
                                    f"is not words of new fact {closing.new + 1}; quote the words that contradict it"))
    if len(item.existing) >= 2 and len({c.existing for c in closings}) == len(item.existing):
        broken.append((None, f"every one of the {len(item.existing)} existing facts is closed; close only a fact "
                             f"that a new fact makes untrue, most existing facts stay true"))
    return broken


class ContradictionDetector(Stage[ContradictIn, ContradictOut]):
    """Base class of the contradict family (``In = ContradictIn``, ``Out = ContradictOut``)."""

    In = ContradictIn
    Out = ContradictOut
