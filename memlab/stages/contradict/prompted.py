"""Prompted fact invalidation (Mnemis 2.1; ``mnemis/invalidate_facts`` is written by memlab:
the paper describes the step, not its prompt). One call per episode for all its new facts and
their candidate existing facts; an item with no existing fact costs no call."""

from __future__ import annotations

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.lm.base import LM
from memlab.lm.jsonparse import object_schema, parse_json
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.contradict.base import ContradictIn, ContradictionDetector, ContradictOut


def contradict_schema(n_existing: int) -> dict:
    return object_schema({"contradicted": {"type": "array", "maxItems": max(n_existing, 1),
                                           "items": {"type": "integer", "minimum": 1, "maximum": max(n_existing, 1)}}})


class PromptedContradictionDetector(PromptedStage, ContradictionDetector):
    """One call on ``prompt`` ({existing}: numbered from 1, {new}); the reply's numbers are
    1-based and mapped back onto indexes (numbers out of range are dropped)."""

    def __init__(
        self,
        lm: LM,
        prompt: str = "mnemis/invalidate_facts",
        max_tokens: PositiveInt = 48,
        temperature: NonNegativeFloat = 0.0,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.prompt = load_prompt(prompt)

    def render(self, item: ContradictIn) -> ChatRequest:
        text = self.prompt.render(existing="\n".join(f"{i}. {f}" for i, f in enumerate(item.existing, start=1)),
                                  new="\n".join(f"- {f}" for f in item.new))
        return self.request(text, json_schema=contradict_schema(len(item.existing)))

    def parse(self, text: str, item: ContradictIn) -> ContradictOut:
        numbers = parse_json(text, object_schema({"contradicted": {"type": "array", "items": {"type": "integer"}}}))
        found = {n - 1 for n in numbers["contradicted"] if 1 <= n <= len(item.existing)}
        return ContradictOut(tuple(sorted(found)))

    def fallback(self, item: ContradictIn, error: str) -> ContradictOut:
        return ContradictOut(error=error)

    def forward(self, batch: list[ContradictIn]) -> list[ContradictOut]:
        return self.forward_where(batch, lambda item: bool(item.existing and item.new), lambda item: ContradictOut())
