"""MAGMA's event extractor: appendix C.1's prompt, verbatim, with a JSON schema enforcing it.

The schema bounds every list (``max_items``) so a small local model cannot ramble; entities
are validated against the utterance (see the family docstring) and, after the call, the
facts, summary and dates the model gave are resolved in code by the injected ``normalizer``
(without one they stay as the model wrote them).
"""

from __future__ import annotations

import re
from dataclasses import replace

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.lm.base import LM
from memlab.lm.errors import ParseError
from memlab.lm.jsonparse import object_schema, parse_json
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.event.base import EventExtractor, EventIn, EventOut
from memlab.stages.temporal import TemporalIn, TemporalNormalizer, annotate


def event_schema(max_items: int) -> dict:
    strings = {"type": "array", "items": {"type": "string"}, "maxItems": max_items}
    return object_schema(
        {
            "entities": strings,
            "topic": {"type": "string"},
            "relationships": strings,
            "semantic_facts": strings,
            "dates_mentioned": strings,
            "summary": {"type": "string"},
        }
    )


class PromptedEventExtractor(PromptedStage, EventExtractor):
    """One constrained LLM call per utterance on ``prompt`` ({speaker}, {text}, {prev_summary})."""

    def __init__(
        self,
        lm: LM,
        prompt: str = "magma/event_extract",
        max_items: PositiveInt = 5,
        max_tokens: PositiveInt = 256,
        temperature: NonNegativeFloat = 0.0,
        normalizer: TemporalNormalizer | None = None,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.prompt = load_prompt(prompt)
        self.max_items = max_items
        self.schema = event_schema(max_items)
        self.normalizer = normalizer

    def render(self, item: EventIn) -> ChatRequest:
        text = self.prompt.render(speaker=item.speaker, text=item.text, prev_summary=item.prev_summary or "(none)")
        return self.request(text, json_schema=self.schema)

    def parse(self, text: str, item: EventIn) -> EventOut:
        data = parse_json(text, self.schema)
        summary = _clean(data["summary"])
        if not summary:
            raise ParseError("empty summary")
        return EventOut(
            entities=tuple(e for e in _strings(data["entities"], self.max_items) if _grounded(e, item)),
            topic=_clean(data["topic"]),
            relationships=_strings(data["relationships"], self.max_items),
            semantic_facts=_strings(data["semantic_facts"], self.max_items),
            dates_mentioned=_strings(data["dates_mentioned"], self.max_items),
            summary=summary,
        )

    def fallback(self, item: EventIn, error: str) -> EventOut:
        return EventOut(error=error)

    def forward(self, batch: list[EventIn]) -> list[EventOut]:
        return [self.resolve_dates(out, item) for out, item in zip(PromptedStage.forward(self, batch), batch)]

    def resolve_dates(self, out: EventOut, item: EventIn) -> EventOut:
        """The facts and summary with their time expressions resolved beside them, and each date
        mentioned as its absolute form when it is one expression."""
        if self.normalizer is None or item.reference is None:
            return out
        texts = [*out.semantic_facts, out.summary, *out.dates_mentioned]
        mentions = [o.mentions for o in self.normalizer([TemporalIn(text, item.reference) for text in texts])]
        resolved = [annotate(text, found) for text, found in zip(texts, mentions)]
        n = len(out.semantic_facts)
        dates = tuple(found[0].resolved if len(found) == 1 else text
                      for text, found in zip(resolved[n + 1:], mentions[n + 1:]))
        return replace(out, semantic_facts=tuple(resolved[:n]), summary=resolved[n] if out.summary else out.summary,
                       dates_mentioned=dates)


def _clean(value: object) -> str:
    return " ".join(str(value).split())


def _strings(values: list, limit: int) -> tuple[str, ...]:
    return tuple(dict.fromkeys(s for s in (_clean(v) for v in values[:limit]) if s))


def _grounded(entity: str, item: EventIn) -> bool:
    """The entity is named in the utterance (any of its words) or is a participant."""
    folded = entity.casefold()
    if any(folded == p.casefold() for p in (item.speaker, *item.participants)):
        return True
    words = [w for w in re.findall(r"\w+", folded) if len(w) > 2]
    text = item.text.casefold()
    return bool(words) and any(re.search(rf"\b{re.escape(w)}\b", text) for w in words)
