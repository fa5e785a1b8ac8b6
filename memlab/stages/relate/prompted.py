"""CompassMem's relation extractor (section 4.2, Eq. 5; appendix F.1 "Event Relation
Extraction"): one call per session over its events and its utterances.

Events are shown as ``E1``, ``E2`` ... with their turns, people and summary; the utterances
follow (cut to ``max_chars_per_call`` characters when a session is long: the events are always
shown whole). The reply is JSON-schema constrained to at most ``max_relations`` relations; each
is kept when both ends name shown events (``E3``, ``3`` or ``[E3]``), its predicate normalised
onto ``RELATION_LABELS`` and its cited turns cut to the session's turn ids.
"""

from __future__ import annotations

import re

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.dates import format_day
from memlab.lm.base import LM
from memlab.lm.errors import ParseError
from memlab.lm.jsonparse import list_schema, object_schema, parse_json
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.relate.base import RelateIn, RelateOut, Relation, RelationExtractor, normalise_label, unique_pairs
from memlab.stages.segment.windows import clean_turn_id

_EVENT_ID = re.compile(r"^\W*(?:E|event)?\s*(\d+)\W*$", re.IGNORECASE)


def relation_schema(max_relations: int) -> dict:
    item = object_schema({
        "source": {"type": "string"},
        "target": {"type": "string"},
        "type": {"type": "string"},
        "evidence": {"type": "array", "items": {"type": "string"}, "maxItems": 6},
    })
    schema = list_schema(item, key="relations")
    schema["properties"]["relations"]["maxItems"] = max_relations
    return schema


def event_index(value: object, n_events: int) -> int | None:
    """0-based index of an event written ``E3`` / ``3`` / ``[E3]`` (None: not one of ``n_events``)."""
    match = _EVENT_ID.match(str(value))
    if not match:
        return None
    index = int(match.group(1)) - 1
    return index if 0 <= index < n_events else None


class PromptedRelationExtractor(PromptedStage, RelationExtractor):
    """Relation extraction of CompassMem 4.2 (module docstring); prompt ``compassmem/relation_extract``."""

    def __init__(
        self,
        lm: LM,
        prompt: str = "compassmem/relation_extract",
        max_relations: PositiveInt = 12,
        max_chars_per_call: PositiveInt = 6000,
        max_tokens: PositiveInt = 640,
        temperature: NonNegativeFloat = 0.0,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.prompt = load_prompt(prompt)
        self.max_relations = max_relations
        self.max_chars_per_call = max_chars_per_call
        self.schema = relation_schema(max_relations)

    def forward(self, batch: list[RelateIn]) -> list[RelateOut]:
        # A session with fewer than two events has no pair to relate: no call.
        return self.forward_where(batch, lambda item: len(item.events) >= 2, lambda item: RelateOut())

    def render(self, item: RelateIn) -> ChatRequest:
        events = "\n".join(
            f"E{n + 1} [{', '.join(e.source_ids)}]" + (f" ({', '.join(e.participants)})" if e.participants else "")
            + f" {e.summary}" for n, e in enumerate(item.events))
        budget = max(0, self.max_chars_per_call - len(events))
        lines: list[str] = []
        for turn in item.turns:
            line = f"[{turn.id}] {turn.render()}"
            if len(line) > budget:
                break
            lines.append(line)
            budget -= len(line) + 1
        date = format_day(item.date) if item.date else "unknown date"
        text = self.prompt.render(date=date, events=events, turns="\n".join(lines) or "(not shown)")
        return self.request(text, json_schema=self.schema)

    def parse(self, text: str, item: RelateIn) -> RelateOut:
        rows = parse_json(text, relation_schema(10_000))["relations"]
        turn_ids = {t.id for t in item.turns}
        relations = []
        for row in rows[: self.max_relations]:
            source, target = event_index(row["source"], len(item.events)), event_index(row["target"], len(item.events))
            if source is None or target is None or source == target:
                continue
            cited = tuple(dict.fromkeys(e for e in (clean_turn_id(x) for x in row.get("evidence", ()))
                                           if e in turn_ids))
            relations.append(Relation(source, target, normalise_label(row["type"]), cited))
        if rows and not relations:
            raise ParseError(f"no relation names two of the events E1-E{len(item.events)}")
        return RelateOut(unique_pairs(relations))

    def fallback(self, item: RelateIn, error: str) -> RelateOut:
        return RelateOut(error=error)
