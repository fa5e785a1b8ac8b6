"""Prompted compressor: SimpleMem's compression prompt (appendix A.1) on one window.

What the code does around the published prompt, so a small model can follow it (none of
it changes the algorithm, and all of it is harmless for a strong model):

* Before the call (``resolve_dates``, run by ``forward`` once per window), each turn's
  relative time expressions are resolved by the injected ``normalizer`` (rules: "yesterday"
  -> "yesterday (9 March 2023)"), using the turn's own timestamp (or its session's): date
  arithmetic is done in code. Rendering and parsing see the resolved window.
* Each dialogue line carries its turn id, and the output schema asks for ``source_turns``
  per unit (with the window's ids as its only allowed values). List sizes are bounded.
* Every unit is validated against its window: unusable supporting ids are dropped and an
  empty list falls back to all of the window's ids; entities that do not occur in the
  window are dropped, and a unit whose content names such an entity, or a conversation
  participant who is not in the window, is dropped (copies of the prompt's example, or
  invented people). A timestamp that does not parse, or lies outside
  ``[window time - max_past_years, window time + max_future_years]``, is replaced by the
  window's time.
* An explicit empty ``memory_units`` list is a valid answer (the window is gated out), but a
  reply whose units were *all* rejected by validation is a ``ParseError``, so the call is
  retried (then falls back) instead of silently losing the window. The retry is a fresh call
  on ``retry_prompt``: A.1 with its worked example replaced by a list of the keys, because
  the 1.5B model copies the example (last in the prompt) as its only unit, and goes on
  copying it when told so. ``retry_prompt=None`` retries with the usual follow-up message.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime
from typing import Any

from memlab.bounds import NonNegativeFloat, NonNegativeInt, PositiveInt
from memlab.lm.base import LM
from memlab.lm.errors import ParseError
from memlab.lm.jsonparse import parse_json
from memlab.lm.types import ChatRequest
from memlab.prompts import PromptTemplate, load_prompt
from memlab.stage import PromptedStage
from memlab.stages.compress.base import (
    SALIENCE_LEVELS,
    CompressIn,
    Compressor,
    CompressOut,
    parse_timestamp,
)
from memlab.stages.temporal.base import TemporalIn, TemporalNormalizer
from memlab.types import MemoryUnit

# What parse accepts (bounds and enums are enforced in code, so a model that ignores them
# loses only the excess, not the whole window).
_UNIT_FIELDS = ("content", "entities", "topic", "timestamp", "salience", "source_turns")
PARSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "memory_units": {
            "type": "array",
            "items": {"type": "object", "properties": {"content": {"type": "string"}}, "required": ["content"]},
        }
    },
    "required": ["memory_units"],
}


def request_schema(turn_ids: tuple[str, ...], max_units: int, max_entities: int, max_sources: int) -> dict[str, Any]:
    """The constrained-decoding schema for one window: bounded lists, ids from the window."""
    unit = {
        "type": "object",
        "properties": {
            "content": {"type": "string"},
            "entities": {"type": "array", "items": {"type": "string"}, "maxItems": max_entities},
            "topic": {"type": "string"},
            "timestamp": {"type": "string"},
            "salience": {"type": "string", "enum": list(SALIENCE_LEVELS)},
            "source_turns": {
                "type": "array",
                "items": {"type": "string", "enum": list(turn_ids)},
                "minItems": 1,
                "maxItems": max(1, min(max_sources, len(turn_ids))),
            },
        },
        "required": list(_UNIT_FIELDS),
    }
    return {
        "type": "object",
        "properties": {"memory_units": {"type": "array", "items": unit, "maxItems": max_units}},
        "required": ["memory_units"],
    }


def _mentions(text: str, name: str) -> bool:
    """``name`` occurs in ``text`` as whole words, ignoring case."""
    name = name.strip()
    return bool(name) and re.search(r"(?<!\w)" + re.escape(name) + r"(?!\w)", text, re.IGNORECASE) is not None


class PromptedCompressor(PromptedStage, Compressor):
    """One LLM call per window on ``prompt`` (+ ``provenance_prompt``); see the module docstring."""

    def __init__(
        self,
        lm: LM,
        normalizer: TemporalNormalizer | None = None,
        prompt: str = "simplemem/compress",
        provenance_prompt: str | None = "simplemem/compress_provenance",
        retry_prompt: str | None = "simplemem/compress_retry",
        max_units: PositiveInt = 6,
        max_entities: PositiveInt = 5,
        max_sources: PositiveInt = 3,
        max_past_years: NonNegativeInt = 30,
        max_future_years: NonNegativeInt = 5,
        max_tokens: PositiveInt = 1024,
        temperature: NonNegativeFloat = 0.0,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.normalizer = normalizer
        self.prompt = load_prompt(prompt)
        self.provenance_prompt = load_prompt(provenance_prompt) if provenance_prompt else None
        self.retry_prompt = load_prompt(retry_prompt) if retry_prompt else None
        self.max_units = max_units
        self.max_entities = max_entities
        self.max_sources = max_sources
        self.max_past_years = max_past_years
        self.max_future_years = max_future_years

    # -- rendering -----------------------------------------------------------------------
    @staticmethod
    def window_time(item: CompressIn) -> datetime | None:
        first = item.turns[0].timestamp if item.turns else None
        return first or item.session.timestamp

    def resolve_dates(self, batch: list[CompressIn]) -> list[CompressIn]:
        """The windows with their turns' relative dates resolved beside them (when a normalizer
        is set), in one normalizer call for the whole batch."""
        if self.normalizer is None:
            return list(batch)
        requests = [TemporalIn(turn.text, turn.timestamp or item.session.timestamp)
                    for item in batch for turn in item.turns]
        texts = iter(self.normalizer.rewrite(requests))
        return [replace(item, turns=tuple(replace(turn, text=next(texts)) for turn in item.turns)) for item in batch]

    def forward(self, batch: list[CompressIn]) -> list[CompressOut]:
        return PromptedStage.forward(self, self.resolve_dates(batch))

    @staticmethod
    def dialogue(item: CompressIn) -> str:
        return "\n".join(f"[{turn.id}] {turn.render()}" for turn in item.turns)

    def render(self, item: CompressIn) -> ChatRequest:
        return self.render_prompt(self.prompt, item)

    def render_prompt(self, prompt: PromptTemplate, item: CompressIn) -> ChatRequest:
        start = self.window_time(item)
        speakers = item.speakers or tuple(dict.fromkeys(turn.speaker for turn in item.turns))
        text = prompt.render(
            window_start_time=start.isoformat() if start else "unknown",
            speakers_list=", ".join(speakers),
            dialogue_window="\n" + self.dialogue(item),
        )
        if self.provenance_prompt is not None:
            text += "\n" + self.provenance_prompt.render()
        return self.request(text, json_schema=request_schema(item.turn_ids, self.max_units, self.max_entities, self.max_sources))

    # -- parsing and validation ---------------------------------------------------------------
    def parse(self, text: str, item: CompressIn) -> CompressOut:
        data = parse_json(text, PARSE_SCHEMA)
        # Validate against what the model was shown: the turns with their dates resolved (by
        # ``forward``), so a unit naming "28 March 2023" for "last Tuesday" is grounded, not dropped.
        window_text = "\n".join(turn.render() for turn in item.turns)
        units: list[MemoryUnit] = []
        seen: set[str] = set()
        for raw in data["memory_units"]:
            unit = self.to_unit(raw, item, window_text, index=len(units))
            if unit is not None and unit.text.casefold() not in seen:
                seen.add(unit.text.casefold())
                units.append(unit)
            if len(units) >= self.max_units:
                break
        if data["memory_units"] and not units:
            raise ParseError(
                f"all {len(data['memory_units'])} memory units failed validation against the window "
                "(empty content, or people/entities that are not in the dialogue)"
            )
        return CompressOut(units=tuple(units))

    def to_unit(self, raw: dict[str, Any], item: CompressIn, window_text: str, index: int) -> MemoryUnit | None:
        """One validated unit from the model's dict, or None when it fails validation."""
        content = " ".join(str(raw.get("content") or "").split())
        if not content:
            return None
        entities_raw = raw.get("entities") if isinstance(raw.get("entities"), list) else []
        entities = list(dict.fromkeys(str(e).strip() for e in entities_raw if str(e).strip()))
        absent = [e for e in entities if not _mentions(window_text, e)]
        if any(_mentions(content, e) for e in absent):
            return None
        present = [s for s in item.speakers if _mentions(window_text, s)]
        if any(_mentions(content, s) for s in item.speakers if s not in present):
            return None
        entities = [e for e in entities if e not in absent][: self.max_entities]
        return MemoryUnit(
            id=f"{item.conversation_id}/{item.window_id}/u{index}",
            text=content,
            source_ids=self.supporting_ids(raw.get("source_turns"), item),
            timestamp=self.unit_time(raw.get("timestamp"), item),
            kind="unit",
            attributes={
                "session": item.session.id,
                "entities": entities,
                "topic": str(raw.get("topic") or "").strip()[:80],
                "salience": str(raw.get("salience")).lower() if str(raw.get("salience")).lower() in SALIENCE_LEVELS else "medium",
            },
        )

    @staticmethod
    def supporting_ids(value: Any, item: CompressIn) -> tuple[str, ...]:
        """The model's supporting ids that are ids of the window (window order); all of the
        window's ids when none is usable."""
        given = {str(v).strip().strip("[]") for v in value} if isinstance(value, list) else set()
        kept = tuple(i for i in item.turn_ids if i in given)
        return kept or item.turn_ids

    def unit_time(self, value: Any, item: CompressIn) -> datetime | None:
        window = self.window_time(item)
        parsed = parse_timestamp(value)
        if parsed is None or window is None:
            return window
        low = window.replace(year=max(1, window.year - self.max_past_years), month=1, day=1)
        high = window.replace(year=window.year + self.max_future_years, month=12, day=31)
        return parsed if low <= parsed <= high else window

    def fallback(self, item: CompressIn, error: str) -> CompressOut:
        return CompressOut(units=(), error=error)
