"""Prompted entity extraction and reflection (Mnemis 2.1; the paper describes both passes
and prints neither prompt: ``mnemis/extract_entities`` and ``mnemis/reflect_entities`` are
written by memlab). One JSON-constrained call per episode; the list is bounded."""

from __future__ import annotations

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.lm.base import LM
from memlab.lm.jsonparse import object_schema, parse_json
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.entity.base import EntityExtractor, EntityIn, EntityOut
from memlab.stages.extraction import distinct, find_name, named_in


def names_schema(max_names: int) -> dict:
    return object_schema({"entities": {"type": "array", "items": {"type": "string", "maxLength": 60},
                                       "maxItems": max_names}})


def context_text(context: tuple[str, ...]) -> str:
    return "\n".join(context) if context else "(none)"


class PromptedEntityExtractor(PromptedStage, EntityExtractor):
    """Extraction on ``prompt`` ({context}, {episode}); reflection on ``reflection_prompt``
    ({context}, {episode}, {found}) when ``EntityIn.found`` is given."""

    def __init__(
        self,
        lm: LM,
        prompt: str = "mnemis/extract_entities",
        reflection_prompt: str = "mnemis/reflect_entities",
        max_names: PositiveInt = 12,
        max_tokens: PositiveInt = 160,
        temperature: NonNegativeFloat = 0.0,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.prompt = load_prompt(prompt)
        self.reflection_prompt = load_prompt(reflection_prompt)
        self.max_names = max_names
        self.schema = names_schema(max_names)

    def render(self, item: EntityIn) -> ChatRequest:
        values = {"context": context_text(item.context), "episode": item.episode}
        if item.found:
            text = self.reflection_prompt.render(**values, found="\n".join(f"- {n}" for n in item.found))
        else:
            text = self.prompt.render(**values)
        return self.request(text, json_schema=self.schema)

    def parse(self, text: str, item: EntityIn) -> EntityOut:
        data = parse_json(text, names_schema(10_000))
        names = [n for n in distinct(data["entities"]) if named_in(n, item.episode) and not find_name(n, item.found)]
        return EntityOut(names=tuple(names[:self.max_names]))

    def fallback(self, item: EntityIn, error: str) -> EntityOut:
        return EntityOut(error=error)
