"""CompassMem's node fusion decision (section 4.2, "Node Fusion & Expansion"; appendix F.1
"Event Coreference & Overlap Prompt"): one call per (new event, most similar existing event)
pair. The reply is JSON-schema constrained to the prompt's four keys, ``reasoning`` last and
bounded (``max_reasoning_chars``); the suggested relation type is normalised onto
``RELATION_LABELS`` (an overlap without one is ``related``).
"""

from __future__ import annotations

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.lm.base import LM
from memlab.lm.jsonparse import object_schema, parse_json
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.fuse.base import EventFuser, FuseIn, FuseOut
from memlab.stages.relate.base import normalise_label


def fuse_schema(max_reasoning_chars: int) -> dict:
    return object_schema({
        "same_event": {"type": "boolean"},
        "has_overlap": {"type": "boolean"},
        "relation_type": {"type": ["string", "null"]},
        "reasoning": {"type": "string", "maxLength": max_reasoning_chars},
    })


class PromptedEventFuser(PromptedStage, EventFuser):
    """The coreference / overlap call of CompassMem 4.2 (module docstring)."""

    def __init__(
        self,
        lm: LM,
        prompt: str = "compassmem/coreference",
        max_reasoning_chars: PositiveInt = 200,
        max_tokens: PositiveInt = 160,
        temperature: NonNegativeFloat = 0.0,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.prompt = load_prompt(prompt)
        self.schema = fuse_schema(max_reasoning_chars)

    def render(self, item: FuseIn) -> ChatRequest:
        text = self.prompt.render(existing=item.existing.describe(), new=item.new.describe())
        return self.request(text, json_schema=self.schema)

    def parse(self, text: str, item: FuseIn) -> FuseOut:
        data = parse_json(text, fuse_schema(10_000))
        same, overlap = bool(data["same_event"]), bool(data["has_overlap"])
        relation = normalise_label(data["relation_type"]) if overlap and not same else None
        return FuseOut(same_event=same, has_overlap=overlap, relation=relation,
                       reasoning=" ".join(str(data["reasoning"]).split()))

    def fallback(self, item: FuseIn, error: str) -> FuseOut:
        return FuseOut(error=error)
