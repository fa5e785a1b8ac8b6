"""Prompted causal-link inference over a numbered neighbourhood (prompt magma/causal_links)."""

from __future__ import annotations

from typing import Literal

from memlab.bounds import NonNegativeFloat, NonNegativeInt, PositiveInt, UnitFloat
from memlab.dates import format_day
from memlab.lm.base import LM
from memlab.lm.jsonparse import object_schema, parse_json
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.consolidate.base import CausalLink, ConsolidateIn, ConsolidateOut, Consolidator, EventRef

ORDERS = ("time", "hops")


class PromptedCausalConsolidator(PromptedStage, Consolidator):
    """Numbers the events ([0] is the new one), asks for ``{"links": [...]}`` and validates.

    ``threshold`` is delta (links scored at or below it are dropped); ``max_neighbours``
    caps the prompt, taking the neighbours nearest in time to the new event first
    (``order="time"``; events of one session share its date, so these are the same session's
    turns) or in the order given, nearest hop first (``order="hops"``: the memory's direct
    neighbours, semantic ones from any session among them); ``max_links`` bounds the list.
    """

    def __init__(
        self,
        lm: LM,
        prompt: str = "magma/causal_links",
        threshold: UnitFloat = 0.5,
        max_neighbours: NonNegativeInt = 8,
        max_links: NonNegativeInt = 3,
        max_chars: PositiveInt = 300,
        max_tokens: PositiveInt = 160,
        temperature: NonNegativeFloat = 0.0,
        order: Literal["time", "hops"] = "time",
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.order = order
        self.prompt = load_prompt(prompt)
        self.threshold = threshold
        self.max_neighbours = max_neighbours
        self.max_links = max_links
        self.max_chars = max_chars

    def numbered(self, item: ConsolidateIn) -> list[EventRef]:
        """The events as numbered in the prompt: the new one, then its first ``max_neighbours``
        neighbours by ``order``."""
        def distance(ref: EventRef) -> float:
            if ref.timestamp is None or item.event.timestamp is None:
                return float("inf")
            return abs((ref.timestamp - item.event.timestamp).total_seconds())

        neighbours = [n for n in item.neighbours if n.id != item.event.id]
        if self.order == "time":
            neighbours = sorted(neighbours, key=distance)
        return [item.event, *neighbours[: self.max_neighbours]]

    def schema(self, count: int) -> dict:
        index = {"type": "integer", "minimum": 0, "maximum": max(count - 1, 0)}
        link = object_schema({"cause": index, "effect": index, "score": {"type": "number"}})
        return object_schema({"links": {"type": "array", "items": link, "maxItems": self.max_links}})

    def event_lines(self, events: list[EventRef]) -> str:
        lines = []
        for i, ref in enumerate(events):
            when = f"({format_day(ref.timestamp)}) " if ref.timestamp else ""
            lines.append(f"[{i}] {when}{ref.text[: self.max_chars]}")
        return "\n".join(lines)

    def render(self, item: ConsolidateIn) -> ChatRequest:
        events = self.numbered(item)
        body = self.prompt.render(events=self.event_lines(events), last=len(events) - 1)  # {last}: optional
        return self.request(body, json_schema=self.schema(len(events)))

    def parse(self, text: str, item: ConsolidateIn) -> ConsolidateOut:
        events = self.numbered(item)
        data = parse_json(text, self.schema(len(events)))
        return self.kept(events, [(raw["cause"], raw["effect"], float(raw["score"])) for raw in data["links"]])

    def kept(self, events: list[EventRef], proposed: list[tuple[int, int, float]]) -> ConsolidateOut:
        """The proposed (cause number, effect number, score) triples that pass the contract's
        checks, one link per ordered pair (its best score)."""
        links: dict[tuple[str, str], CausalLink] = {}
        for cause, effect, score in proposed:
            if cause == effect or 0 not in (cause, effect):
                continue  # not a link of the new event
            if score <= self.threshold:
                continue
            first, second = events[cause], events[effect]
            if first.timestamp and second.timestamp and first.timestamp > second.timestamp:
                continue  # a cause cannot follow its effect
            key = (first.id, second.id)
            if key not in links or links[key].score < score:
                links[key] = CausalLink(first.id, second.id, min(score, 1.0))
        return ConsolidateOut(links=tuple(links.values()))

    def fallback(self, item: ConsolidateIn, error: str) -> ConsolidateOut:
        return ConsolidateOut(error=error)
