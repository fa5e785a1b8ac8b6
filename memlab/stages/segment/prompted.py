"""CompassMem's event segmenter (section 4.2, Eq. 4; appendix F.1 "Event Extraction"): a
session -> events, each ``<span of turns, time, summary, participants>``.

One call per window of at most ``max_turns_per_call`` turns and ``max_chars_per_call``
characters. Adaptations for small local models, none of which changes what an event is:

* The paper gives the model a whole session; the 1.5B model then fills its list with copies
  of one event until the token limit (conv-26 session 1: 10 copies, 279 s for 1 event), so
  windows are 10 turns by default, and the JSON schema allows at most ``max_events`` events
  and at most half the window's turns per call (no room to pad the list with repeats).
* Relative dates are resolved in code (``normalizer``) and written into the turns before the
  call.
* With ``cite_turns`` (the default) the schema makes every event cite at least one of the
  window's turn ids (an enum of them); a reply with an event citing none (a backend that does
  not enforce the schema) is a ``ParseError``, retried once, and then kept as salvage: the
  event gets the turns sharing most words with it (``guessed_sources``, ``attributes["provenance"]``
  ``guessed``; counted failure). ``cite_turns: false`` is issue 23's schema (``"turns": []``
  allowed, guessed without a retry), which the teacher's cached replies were made with.
* The published prompt's "Extract 6-10 comprehensive events" is per session (LoCoMo's average
  about 22 turns: 2-4 turns an event); the template's ``{event_count}`` is that rate for the
  window, ``ceil(turns / 4)`` to ``turns // 2`` (3-5 for 10 turns), which is also the schema's
  maximum, so instruction and schema agree.
* An event sharing no word with the window is dropped; a decoding loop (the same summary
  repeated) is a ``ParseError``, retried, and then the distinct events of the looping reply
  are kept (counted failure).
* Runs of turns no event claims (a window whose call failed for good: all of them) become
  extractive events of at most ``uncovered_span`` turns (``attributes["extractive"]``,
  provenance ``filled``), so no turn is lost from memory. With ``uncovered: attach``, a run in a
  window that has events joins the event claiming the turn before it (else after it) instead:
  the model's events keep their cited turns, and the joined ones are listed in
  ``attributes["attached_turns"]`` (the 1.5B model cites about two turns an event and leaves
  the rest, so "events" made 58% of conv-26's first events filled-in spans; BENCHMARKS.md,
  "Issue 40"). With ``split_failed``, a window that gave no event even after the retry (at
  least 4 turns) is cut in two and each half asked once more (windows ``<n>a``, ``<n>b``); a
  half that fails too becomes filled spans.

Each event becomes a ``MemoryUnit`` of kind ``event``: ``text`` is the summary (what is
embedded and shown), ``source_ids`` the event's turns (its span o), ``timestamp`` the session
date (tau: what the paper's prompt leaves to the model is set in code), and ``attributes``
``session`` and ``participants`` (pi: the people the model named that the window mentions,
else the speakers of the event's turns).
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Literal

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.lm.base import LM
from memlab.lm.errors import ParseError
from memlab.lm.jsonparse import list_schema, object_schema, parse_json
from memlab.lm.types import ChatRequest
from memlab.memory.structure import FILLED, GUESSED, STATED
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.segment.base import Segmenter, SegmentIn, SegmentOut
from memlab.stages.segment.rules import format_date
from memlab.stages.segment.windows import (
    TurnWindow,
    cited_sources,
    grounded,
    guessed_sources,
    normalised,
    repetition_loop,
    turn_windows,
)
from memlab.stages.temporal import TemporalNormalizer
from memlab.types import MemoryUnit, Turn


def event_schema(max_events: int, max_people: int, turn_ids: tuple[str, ...] | None = None) -> dict:
    """The reply's schema; with ``turn_ids`` every event cites at least one of them."""
    turns: dict = {"type": "array", "items": {"type": "string"}, "maxItems": 40}
    if turn_ids is not None:
        turns = {"type": "array", "items": {"enum": list(turn_ids)}, "minItems": 1, "maxItems": len(turn_ids)}
    item = object_schema({
        "turns": turns,
        "summary": {"type": "string", "minLength": 1},
        "people": {"type": "array", "items": {"type": "string"}, "maxItems": max_people},
    })
    schema = list_schema(item, key="events")
    schema["properties"]["events"]["maxItems"] = max_events
    return schema


def event_unit(window: TurnWindow, n: int, summary: str, sources: tuple[str, ...],
               participants: tuple[str, ...], extractive: bool = False, provenance: str = STATED) -> MemoryUnit:
    """The memory unit of a window's ``n``-th event (the family's unit convention): ``extractive``
    when its text is its turns themselves; ``provenance`` how its turns were found
    (``memlab.memory.structure``: stated by the segmenter, guessed or filled in)."""
    return MemoryUnit(
        id=f"{window.conversation_id}/{window.session.id}/w{window.index}/event{n}",
        text=summary,
        source_ids=sources,
        timestamp=window.session.timestamp,
        kind="event",
        attributes={"session": window.session.id, "participants": list(participants), "extractive": extractive,
                    "provenance": provenance},
    )


def extractive_summary(turns: tuple[Turn, ...]) -> str:
    """An event's text made from its turns themselves (``Speaker: text ...``)."""
    return " ".join(turn.render() for turn in turns)


def with_uncovered_turns(window: TurnWindow, events: list[MemoryUnit], span: int, max_people: int,
                         attach: bool = False) -> list[MemoryUnit]:
    """``events`` plus the runs of the window's turns no event claims, in turn order: no turn is
    lost from memory. Each run becomes extractive events of at most ``span`` turns, or, with
    ``attach`` and some event in the window, joins the event that claims the turn before it (else
    the one after it), listed in that event's ``attributes["attached_turns"]``."""
    claimed = {turn_id for unit in events for turn_id in unit.source_ids}
    runs: list[list[Turn]] = []
    for i, turn in enumerate(window.turns):
        if turn.id in claimed:
            continue
        if runs and runs[-1][-1] is window.turns[i - 1] and (attach or len(runs[-1]) < span):
            runs[-1].append(turn)
        else:
            runs.append([turn])
    order = {turn.id: i for i, turn in enumerate(window.turns)}
    if attach and events:
        return attached(window, events, runs, order)
    extra = [event_unit(window, len(events) + n, extractive_summary(tuple(run)), tuple(t.id for t in run),
                        speakers_of(tuple(run), tuple(t.id for t in run), max_people), extractive=True,
                        provenance=FILLED)
             for n, run in enumerate(runs)]
    return sorted(events + extra, key=lambda u: min(order[t] for t in u.source_ids))


def attached(window: TurnWindow, events: list[MemoryUnit], runs: list[list[Turn]], order: dict[str, int]
             ) -> list[MemoryUnit]:
    """``events`` with each unclaimed run joined to the event owning the turn before it (the
    first event claiming it), or, for a run opening the window, the turn after it."""
    owner = {}
    for n, unit in enumerate(events):
        for turn_id in unit.source_ids:
            owner.setdefault(turn_id, n)
    extra: dict[int, list[str]] = {}
    for run in runs:
        first, last = order[run[0].id], order[run[-1].id]
        neighbour = window.turns[first - 1].id if first > 0 else window.turns[last + 1].id
        extra.setdefault(owner[neighbour], []).extend(turn.id for turn in run)
    joined = []
    for n, unit in enumerate(events):
        if n in extra:
            turns = tuple(sorted((*unit.source_ids, *extra[n]), key=order.get))
            unit = replace(unit, source_ids=turns, attributes={**unit.attributes, "attached_turns": extra[n]})
        joined.append(unit)
    return sorted(joined, key=lambda u: min(order[t] for t in u.source_ids))


def speakers_of(turns: tuple[Turn, ...], sources: tuple[str, ...], limit: int) -> tuple[str, ...]:
    return tuple(dict.fromkeys(t.speaker for t in turns if t.id in sources))[:limit]


class PromptedEventSegmenter(PromptedStage, Segmenter):
    """Event segmentation of CompassMem 4.2 (see the module docstring); prompt ``compassmem/event_extract``."""

    def __init__(
        self,
        lm: LM,
        prompt: str = "compassmem/event_extract",
        max_events: PositiveInt = 10,
        max_people: PositiveInt = 3,
        max_turns_per_call: PositiveInt | None = 10,
        max_chars_per_turn: PositiveInt = 1200,
        max_chars_per_call: PositiveInt = 8000,
        max_tokens: PositiveInt = 1024,
        loop_repeats: PositiveInt = 3,
        uncovered_span: PositiveInt = 3,
        uncovered: Literal["events", "attach"] = "events",
        split_failed: bool = False,
        cite_turns: bool = True,
        temperature: NonNegativeFloat = 0.0,
        normalizer: TemporalNormalizer | None = None,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.prompt = load_prompt(prompt)
        self.max_events = max_events
        self.max_people = max_people
        self.max_turns_per_call = max_turns_per_call
        self.max_chars_per_turn = max_chars_per_turn
        self.max_chars_per_call = max_chars_per_call
        self.loop_repeats = loop_repeats
        self.uncovered_span = uncovered_span
        self.uncovered = uncovered
        self.split_failed = split_failed
        self.cite_turns = cite_turns
        self.normalizer = normalizer
        self.schema = event_schema(max_events, max_people)

    def windows(self, item: SegmentIn) -> list[TurnWindow]:
        return turn_windows(item, self.normalizer, self.max_turns_per_call, self.max_chars_per_call,
                            self.max_chars_per_turn)

    def forward(self, batch: list[SegmentIn]) -> list[SegmentOut]:  # type: ignore[override]
        windows = [(i, w) for i, item in enumerate(batch) for w in self.windows(item)]
        results = PromptedStage.forward(self, [w for _, w in windows]) if windows else []
        if self.split_failed:
            windows, results = self.with_failed_windows_split(windows, results)
        units: list[list[MemoryUnit]] = [[] for _ in batch]
        errors: list[str | None] = [None] * len(batch)
        for (i, window), (found, error) in zip(windows, results):
            units[i].extend(with_uncovered_turns(window, found, self.uncovered_span, self.max_people,
                                                 attach=self.uncovered == "attach"))
            errors[i] = error or errors[i]
        return [SegmentOut(tuple(u), e) for u, e in zip(units, errors)]

    def with_failed_windows_split(self, windows: list, results: list) -> tuple[list, list]:
        """Each window that gave no event (failed for good) and has at least 4 turns, replaced by
        its two halves, asked once more in one batch; the failed window's error is kept."""
        failed = [k for k, (window, (found, _)) in enumerate(zip((w for _, w in windows), results))
                  if not found and len(window.turns) >= 4]
        if not failed:
            return windows, results
        halves = [(k, half) for k in failed for half in windows[k][1].halves()]
        answers = iter(PromptedStage.forward(self, [half for _, half in halves]))
        again = {k: [] for k in failed}
        for k, half in halves:
            found, error = next(answers)
            again[k].append(((windows[k][0], half), (found, error or results[k][1])))
        out_windows, out_results = [], []
        for k, (item, result) in enumerate(zip(windows, results)):
            for window, answer in again.get(k, [(item, result)]):
                out_windows.append(window)
                out_results.append(answer)
        return out_windows, out_results

    def events_per_call(self, window: TurnWindow) -> int:
        """At most ``max_events``, and at most half the window's turns (at least one): no room
        to pad the list with repeats."""
        return max(1, min(self.max_events, len(window.turns) // 2))

    def event_count(self, window: TurnWindow) -> str:
        """The template's "Extract {event_count} comprehensive events": the paper's 6-10 per
        session as a rate for the window (module docstring)."""
        most = self.events_per_call(window)
        return f"{min(most, max(1, math.ceil(len(window.turns) / 4)))}-{most}"

    def render(self, item: TurnWindow) -> ChatRequest:  # type: ignore[override]
        text = self.prompt.render(date=format_date(item.session), turns="\n".join(item.lines),
                                  event_count=self.event_count(item))
        ids = tuple(turn.id for turn in item.turns) if self.cite_turns else None
        return self.request(text, json_schema=event_schema(self.events_per_call(item), self.max_people, ids))

    def parse(self, text: str, item: TurnWindow) -> tuple[list[MemoryUnit], str | None]:  # type: ignore[override]
        rows = parse_json(text, event_schema(10_000, 10_000))["events"]
        units = self.grounded_events(rows, item)
        truncated = not text.rstrip().rstrip("`").rstrip().endswith("}")
        loop = repetition_loop([str(row["summary"]) for row in rows], truncated, self.loop_repeats, "event")
        if loop is not None:
            error = f"repetition loop: {loop}; write each event once"
            units = [u for u in units if repetition_loop([u.text], False, self.loop_repeats, "event") is None]
            raise ParseError(error, salvage=(units, error) if units else None)
        if not units:
            raise ParseError("no extracted event is grounded in the dialog's utterances")
        guessed = [n for n, u in enumerate(units, start=1) if u.attributes["provenance"] == GUESSED]
        if self.cite_turns and guessed:
            error = (f"event(s) {guessed} cite none of the dialog's utterance ids; "
                     "give every event the ids of its utterances")
            raise ParseError(error, salvage=(units, error))
        return units, None

    def grounded_events(self, rows: list[dict], item: TurnWindow) -> list[MemoryUnit]:
        """The reply's distinct events grounded in the window, with checked turns and people."""
        units: list[MemoryUnit] = []
        seen: set[str] = set()
        for row in rows[: self.max_events]:
            summary = " ".join(str(row["summary"]).split())
            if not summary or normalised(summary) in seen or not grounded(summary, item.turns):
                continue
            cited = cited_sources(row.get("turns", ()), item.turns)
            sources = cited or guessed_sources(summary, item.turns)
            if not sources:
                continue
            seen.add(normalised(summary))
            people = self.checked_people(row.get("people", ()), item) or speakers_of(item.turns, sources, self.max_people)
            units.append(event_unit(item, len(units), summary, sources, people, provenance=STATED if cited else GUESSED))
        return units

    def checked_people(self, names: list, item: TurnWindow) -> tuple[str, ...]:
        """The named people the window mentions (a speaker, or a name in its text), at most ``max_people``."""
        text = " ".join(item.lines).casefold()
        speakers = {t.speaker.casefold(): t.speaker for t in item.turns}
        kept: list[str] = []
        for name in names:
            name = " ".join(str(name).split())
            folded = name.casefold()
            if folded in speakers:
                name = speakers[folded]
            elif not name or not re.search(rf"\b{re.escape(folded)}\b", text):
                continue
            if name not in kept:
                kept.append(name)
        return tuple(kept[: self.max_people])

    def fallback(self, item: TurnWindow, error: str) -> tuple[list[MemoryUnit], str | None]:  # type: ignore[override]
        return [], error  # every turn is then uncovered: ``with_uncovered_turns`` makes them events
