"""Relate family: the events of one session -> typed relations between them (CompassMem Eq. 5).

The paper's predicates are open ("causal, motivation, enablement, follow_up, temporal_before,
temporal_after, contrast, part_of, parallel, elaboration ... not a closed set"). memlab maps
every predicate a model writes onto ``RELATION_LABELS`` with ``normalise_label`` (the mapping
is in code, below), so relations from any extractor are comparable and a classifier can learn
them; a predicate outside the mapping becomes ``related``.

Contract
--------
* ``RelateIn.events`` are the session's events in order; a ``Relation`` names them by index
  (``source`` -> ``target``, never equal) and carries a label from ``RELATION_LABELS`` and the
  turns it cites as its minimal evidence (``cited_turns``: ids of ``RelateIn.turns``; may be empty).
* At most one relation per unordered pair (the first one given wins).
* A failed call yields no relations with ``error`` set (counted failure).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from memlab.stage import Stage
from memlab.stages.event_view import EventView
from memlab.types import Turn

#: The label set every relation is normalised onto (the paper's examples + ``related``).
RELATION_LABELS: tuple[str, ...] = (
    "causal", "motivation", "enablement", "follow_up", "temporal_before", "temporal_after",
    "contrast", "part_of", "parallel", "elaboration", "related",
)
#: The classifier's extra class for a pair with no relation (never stored as an edge).
NO_RELATION = "none"

#: Predicate spellings seen from models -> label (after lower-casing, non-letters -> "_").
_SYNONYMS = {
    "cause": "causal", "causes": "causal", "caused": "causal", "caused_by": "causal", "causation": "causal",
    "cause_effect": "causal", "result": "causal", "results_in": "causal", "consequence": "causal", "effect": "causal",
    "leads_to": "causal", "led_to": "causal", "reason": "motivation", "motivates": "motivation",
    "motivated_by": "motivation", "purpose": "motivation", "goal": "motivation", "enables": "enablement",
    "enable": "enablement", "prerequisite": "enablement", "precondition": "enablement", "followup": "follow_up",
    "follows": "follow_up", "follow": "follow_up", "continuation": "follow_up", "sequel": "follow_up",
    "before": "temporal_before", "precedes": "temporal_before", "temporal": "temporal_before",
    "after": "temporal_after", "then": "temporal_after", "subsequent": "temporal_after",
    "contrasts": "contrast", "contradiction": "contrast", "opposite": "contrast", "conflict": "contrast",
    "partof": "part_of", "subevent": "part_of", "sub_event": "part_of", "component": "part_of",
    "includes": "part_of", "parallels": "parallel", "similar": "parallel", "simultaneous": "parallel",
    "concurrent": "parallel", "same_topic": "parallel", "elaborates": "elaboration", "detail": "elaboration",
    "details": "elaboration", "explanation": "elaboration", "clarification": "elaboration",
    "example": "elaboration",
}


def normalise_label(predicate: str | None) -> str:
    """``predicate`` as one of ``RELATION_LABELS`` (``related`` when it names none of them)."""
    key = re.sub(r"[^a-z]+", "_", str(predicate or "").casefold()).strip("_")
    if key in RELATION_LABELS:
        return key
    if key in _SYNONYMS:
        return _SYNONYMS[key]
    for part in key.split("_"):  # "strong_causal_link", "temporal_before_relation"
        if part in _SYNONYMS and part != "temporal":  # "temporal" alone says neither before nor after
            return _SYNONYMS[part]
    for label in RELATION_LABELS:
        if label in key:
            return label
    return "related"


@dataclass(frozen=True)
class RelateIn:
    events: tuple[EventView, ...]
    #: The session's turns (what relations cite); may be empty.
    turns: tuple[Turn, ...] = ()
    date: datetime | None = None


@dataclass(frozen=True)
class Relation:
    source: int
    target: int
    label: str
    #: The turns the extractor cites for the link (F.1's "minimal evidence utterance ids").
    cited_turns: tuple[str, ...] = ()


@dataclass(frozen=True)
class RelateOut:
    relations: tuple[Relation, ...] = ()
    error: str | None = None


def unique_pairs(relations: list[Relation]) -> tuple[Relation, ...]:
    """Valid relations, at most one per unordered pair, in the order given."""
    seen: set[frozenset[int]] = set()
    kept = []
    for relation in relations:
        pair = frozenset((relation.source, relation.target))
        if len(pair) == 2 and pair not in seen:
            seen.add(pair)
            kept.append(relation)
    return tuple(kept)


class RelationExtractor(Stage[RelateIn, RelateOut]):
    """Base class of the relate family (``In = RelateIn``, ``Out = RelateOut``)."""

    In = RelateIn
    Out = RelateOut
