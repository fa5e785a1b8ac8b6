"""Prompted temporal normalizer: the LLM finds and resolves the expressions, code checks them."""

from __future__ import annotations

import logging
from datetime import date

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.dates import WEEKDAY_NAMES, format_day
from memlab.lm.base import LM
from memlab.lm.jsonparse import parse_json
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.temporal.base import (
    TemporalIn,
    TemporalNormalizer,
    TemporalOut,
    TimeMention,
    describe,
    infer_granularity,
)

log = logging.getLogger(__name__)

# Character classes, not \d: llama.cpp's grammar converter reads "\d" as a literal.
_ISO_DATE = "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
NO_REFERENCE = "no reference time: relative expressions cannot be resolved"


def mentions_schema(max_items: int) -> dict:
    """``{"mentions": [{span, resolved_date_start, resolved_date_end}, ...]}``, at most ``max_items``."""
    item = {
        "type": "object",
        "properties": {
            "span": {"type": "string", "minLength": 1},
            "resolved_date_start": {"type": "string", "pattern": _ISO_DATE},
            "resolved_date_end": {"type": "string", "pattern": _ISO_DATE},
        },
        "required": ["span", "resolved_date_start", "resolved_date_end"],
    }
    return {
        "type": "object",
        "properties": {"mentions": {"type": "array", "items": item, "maxItems": max_items}},
        "required": ["mentions"],
    }


def _whole_words(text: str, start: int, end: int) -> bool:
    return not (start > 0 and text[start - 1].isalnum()) and not (end < len(text) and text[end].isalnum())


def locate(text: str, span: str, taken: list[tuple[int, int]]) -> int | None:
    """Where ``span`` occurs in ``text`` as whole words, clear of the ``taken`` ranges
    (exact case first, then ignoring case); None if nowhere."""
    passes = [(text, span)]
    if len(text.lower()) == len(text) and len(span.lower()) == len(span):  # offsets stay valid
        passes.append((text.lower(), span.lower()))
    for haystack, needle in passes:
        at = haystack.find(needle)
        while at >= 0:
            end = at + len(needle)
            if _whole_words(text, at, end) and all(end <= a or at >= b for a, b in taken):
                return at
            at = haystack.find(needle, at + 1)
    return None


class PromptedTemporalNormalizer(PromptedStage, TemporalNormalizer):
    """One JSON-constrained LLM call per text; the model gives spans and date ranges.

    The parser keeps an item only if its span occurs in the text (at a place no earlier
    item took) and its dates are real dates in order; the rest are dropped and counted in
    ``dropped``. Granularity and the readable form are computed from the dates, not asked
    for. An item without a reference is answered without a call (no mentions, an error).
    """

    def __init__(
        self,
        lm: LM,
        prompt: str = "memlab/temporal_normalize",
        max_items: PositiveInt = 8,
        max_tokens: PositiveInt = 384,
        temperature: NonNegativeFloat = 0.0,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.prompt = load_prompt(prompt)
        self.max_items = max_items
        self.schema = mentions_schema(max_items)
        self.dropped = 0

    def render(self, item: TemporalIn) -> ChatRequest:
        ref = item.reference_date
        if ref is None:
            raise ValueError(NO_REFERENCE)
        reference = f"{WEEKDAY_NAMES[ref.weekday()]}, {format_day(ref)}"
        text = self.prompt.render(reference=reference, text=item.text, max_items=self.max_items)
        return self.request(text, json_schema=self.schema)

    def parse(self, text: str, item: TemporalIn) -> TemporalOut:
        """Raises ``ParseError`` (from ``parse_json``) when there is no schema-valid JSON."""
        data = parse_json(text, schema=self.schema)
        mentions: list[TimeMention] = []
        taken: list[tuple[int, int]] = []
        for entry in data["mentions"]:
            span = entry["span"].strip()
            try:
                start = date.fromisoformat(entry["resolved_date_start"])
                end = date.fromisoformat(entry["resolved_date_end"])
            except ValueError:
                self._drop(span, "not a calendar date")
                continue
            if end < start:
                self._drop(span, "end before start")
                continue
            at = locate(item.text, span, taken) if span else None
            if at is None:
                self._drop(span, "not in the text")
                continue
            taken.append((at, at + len(span)))
            granularity = infer_granularity(start, end)
            mentions.append(TimeMention(span=item.text[at:at + len(span)], start_char=at, end_char=at + len(span),
                                        start=start, end=end, granularity=granularity,
                                        resolved=describe(start, end, granularity)))
        return TemporalOut(mentions=tuple(sorted(mentions, key=lambda m: m.start_char)))

    def _drop(self, span: str, reason: str) -> None:
        self.dropped += 1
        log.debug("%s: dropped %r (%s)", type(self).__name__, span, reason)

    def fallback(self, item: TemporalIn, error: str) -> TemporalOut:
        return TemporalOut(mentions=(), error=error)

    def forward(self, batch: list[TemporalIn]) -> list[TemporalOut]:
        dated = [i for i, item in enumerate(batch) if item.reference_date is not None]
        outputs = [TemporalOut(mentions=(), error=NO_REFERENCE)] * len(batch)
        for i, out in zip(dated, super().forward([batch[i] for i in dated]) if dated else []):
            outputs[i] = out
        return outputs
