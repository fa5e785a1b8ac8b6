"""Prompted EDU extraction (EMem 3.2): a session (or a window of its turns) -> EDUs, one call.

Adaptations for small local models, none of which changes what is extracted: relative dates
are resolved in code (the injected ``normalizer``; none: left as said) and written into the
turns before the call; the output is JSON-schema constrained with at most ``max_edus`` items; a long session
can be split into windows of ``max_turns_per_call`` turns and ``max_chars_per_call``
characters (``None`` turns: the whole session in one call, as in the paper, when it fits); every EDU's source ids are checked against the window
(``cited_sources``; none cited: ``guessed_sources``, ``attributes["provenance"]`` ``guessed``) and EDUs sharing no word with the window are dropped.

Guards against the weak model's degenerate outputs (the first 1.5B runs looped):

* Windows are short by default (``max_turns_per_call`` = 12), so one call's input and
  output stay short, and a call asks for fewer EDUs than its window has turns
  (``edus_per_call``), which leaves no room for padding the list with repeats.
* EDUs are de-duplicated on normalised text (case, punctuation and spacing ignored) within
  a window and across the windows of a session; the first occurrence is kept.
* A repetition loop is a ``ParseError``, retried: the same EDU ``loop_repeats`` times or
  more, an EDU repeating one short phrase (2-4 words) ``loop_repeats + 1`` times or more, or
  output cut off (no closing brace) that repeats an EDU. If the retry loops too, the window
  keeps the distinct grounded EDUs of the looping reply (``ParseError.salvage``) and the
  failure is counted: a loop usually starts after several good EDUs, and dropping the whole
  window lost them (13 of conv-26's 60 windows with the 1.5B model).
"""

from __future__ import annotations

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.lm.base import LM
from memlab.lm.errors import ParseError
from memlab.lm.jsonparse import list_schema, object_schema, parse_json
from memlab.lm.types import ChatRequest
from memlab.memory.structure import GUESSED, STATED
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.edu.base import EDUExtractor, grounded
from memlab.stages.segment.base import SegmentIn, SegmentOut
from memlab.stages.segment.rules import format_date
from memlab.stages.segment.windows import (
    TurnWindow,
    cited_sources,
    guessed_sources,
    normalised,
    repetition_loop,
    turn_windows,
)
from memlab.stages.temporal import TemporalNormalizer
from memlab.types import MemoryUnit


def edu_schema(max_edus: int | None = None) -> dict:
    """``{"edus": [{text, source_turns}]}``; ``max_edus`` bounds the request (parsing is lenient)."""
    item = object_schema(
        {
            "text": {"type": "string", "minLength": 1},
            "source_turns": {"type": "array", "items": {"type": "string"}, **({"maxItems": 8} if max_edus else {})},
        }
    )
    schema = list_schema(item, key="edus")
    if max_edus is not None:
        schema["properties"]["edus"]["maxItems"] = max_edus
    return schema


class PromptedEDUExtractor(PromptedStage, EDUExtractor):
    """EDU extractor of EMem 3.2 (see the module docstring); prompt ``emem/edu_extract``."""

    def __init__(
        self,
        lm: LM,
        prompt: str = "emem/edu_extract",
        max_edus: PositiveInt = 10,
        max_turns_per_call: PositiveInt | None = 12,
        max_chars_per_turn: PositiveInt = 1200,
        max_chars_per_call: PositiveInt = 6000,
        max_tokens: PositiveInt = 768,
        loop_repeats: PositiveInt = 3,
        temperature: NonNegativeFloat = 0.0,
        normalizer: TemporalNormalizer | None = None,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.prompt = load_prompt(prompt)
        self.max_edus = max_edus
        self.max_turns_per_call = max_turns_per_call
        self.max_chars_per_turn = max_chars_per_turn
        self.max_chars_per_call = max_chars_per_call
        self.loop_repeats = loop_repeats
        self.normalizer = normalizer

    def windows(self, item: SegmentIn) -> list[TurnWindow]:
        return turn_windows(item, self.normalizer, self.max_turns_per_call, self.max_chars_per_call,
                            self.max_chars_per_turn)

    def edus_per_call(self, window: TurnWindow) -> int:
        """At most ``max_edus``, and fewer than the window's turns (at least one)."""
        return max(1, min(self.max_edus, len(window.turns) - 1))

    def forward(self, batch: list[SegmentIn]) -> list[SegmentOut]:  # type: ignore[override]
        windows = [w for item in batch for w in self.windows(item)]
        results = PromptedStage.forward(self, windows) if windows else []
        by_session: dict[tuple[str, str], list[MemoryUnit]] = {}
        seen: dict[tuple[str, str], set[str]] = {}
        errors: dict[tuple[str, str], str] = {}
        for window, (units, error) in zip(windows, results):
            key = (window.conversation_id, window.session.id)
            keys = seen.setdefault(key, set())
            for unit in units:  # the same EDU from two windows of one session: keep the first
                if normalised(unit.text) not in keys:
                    keys.add(normalised(unit.text))
                    by_session.setdefault(key, []).append(unit)
            if error:
                errors[key] = error
        return [
            SegmentOut(tuple(by_session.get((i.conversation_id, i.session.id), [])),
                       errors.get((i.conversation_id, i.session.id)))
            for i in batch
        ]

    # -- one call ------------------------------------------------------------------------
    def render(self, item: TurnWindow) -> ChatRequest:  # type: ignore[override]
        limit = self.edus_per_call(item)
        text = self.prompt.render(date=format_date(item.session), turns="\n".join(item.lines), max_edus=limit)
        return self.request(text, json_schema=edu_schema(limit))

    def parse(self, text: str, item: TurnWindow) -> tuple[list[MemoryUnit], str | None]:  # type: ignore[override]
        rows = parse_json(text, edu_schema())["edus"]
        truncated = not text.rstrip().rstrip("`").rstrip().endswith("}")
        units = self.grounded_units(rows, item)
        loop = repetition_loop([str(row["text"]) for row in rows], truncated, self.loop_repeats, "EDU")
        if loop is not None:
            error = f"repetition loop: {loop}; write each EDU once"
            # one copy of a repeated EDU is kept; an EDU that itself loops on a phrase is not
            units = [u for u in units if repetition_loop([u.text], False, self.loop_repeats, "EDU") is None]
            raise ParseError(error, salvage=(units, error) if units else None)
        if rows and not units:
            raise ParseError("no extracted EDU is grounded in the session's turns")
        return units, None

    def grounded_units(self, rows: list[dict], item: TurnWindow) -> list[MemoryUnit]:
        """The reply's distinct EDUs that are grounded in the window, with validated sources."""
        units = []
        seen: set[str] = set()
        for row in rows:
            if len(units) >= self.edus_per_call(item):
                break
            edu = " ".join(row["text"].split())
            if not edu or normalised(edu) in seen or not grounded(edu, item.turns):
                continue
            seen.add(normalised(edu))
            cited = cited_sources(row.get("source_turns", ()), item.turns)
            sources = cited or guessed_sources(edu, item.turns)
            if not sources:
                continue
            units.append(self.make_unit(item, len(units), edu, sources, provenance=STATED if cited else GUESSED))
        return units

    def fallback(self, item: TurnWindow, error: str) -> tuple[list[MemoryUnit], str | None]:  # type: ignore[override]
        return [], error

    @staticmethod
    def make_unit(window: TurnWindow, n: int, text: str, sources: tuple[str, ...], kind: str = "edu", **attributes) -> MemoryUnit:
        speakers = tuple(dict.fromkeys(t.speaker for t in window.turns if t.id in sources))
        return MemoryUnit(
            id=f"{window.conversation_id}/{window.session.id}/w{window.index}/{kind}{n}",
            text=text,
            source_ids=sources,
            timestamp=window.session.timestamp,
            kind=kind,
            speaker=speakers[0] if len(speakers) == 1 else None,
            attributes={"session": window.session.id, "speakers": list(speakers), **attributes},
        )

