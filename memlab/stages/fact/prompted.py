"""Prompted fact (edge) extraction and reflection (Mnemis 2.1; the paper describes both
passes and prints neither prompt: ``mnemis/extract_facts`` and ``mnemis/reflect_facts`` are
written by memlab). One JSON-constrained call per episode; dates are resolved afterwards by
the injected normaliser (family docstring)."""

from __future__ import annotations

from dataclasses import replace

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.lm.base import LM
from memlab.lm.jsonparse import list_schema, parse_json
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.entity.prompted import context_text
from memlab.stages.extraction import find_name, one_line
from memlab.stages.fact.base import Fact, FactExtractor, FactIn, FactOut
from memlab.stages.temporal import TemporalIn, TemporalNormalizer, annotate


def facts_schema(max_facts: int, max_fact_chars: int) -> dict:
    schema = list_schema({"type": "object", "properties": {
        "source": {"type": "string"},
        "target": {"type": "string"},
        "fact": {"type": "string", "maxLength": max_fact_chars},
    }, "required": ["source", "target", "fact"]}, key="facts")
    schema["properties"]["facts"]["maxItems"] = max_facts
    return schema


class PromptedFactExtractor(PromptedStage, FactExtractor):
    """Extraction on ``prompt`` ({context}, {episode}, {entities}); reflection on
    ``reflection_prompt`` (the same and {found}) when ``FactIn.found`` is given."""

    def __init__(
        self,
        lm: LM,
        prompt: str = "mnemis/extract_facts",
        reflection_prompt: str = "mnemis/reflect_facts",
        max_facts: PositiveInt = 8,
        max_fact_chars: PositiveInt = 200,
        max_tokens: PositiveInt = 512,
        temperature: NonNegativeFloat = 0.0,
        normalizer: TemporalNormalizer | None = None,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.prompt = load_prompt(prompt)
        self.reflection_prompt = load_prompt(reflection_prompt)
        self.max_facts = max_facts
        self.max_fact_chars = max_fact_chars
        self.schema = facts_schema(max_facts, max_fact_chars)
        self.normalizer = normalizer

    def render(self, item: FactIn) -> ChatRequest:
        values = {"context": context_text(item.context), "episode": item.episode,
                  "entities": "\n".join(f"- {name}" for name in item.entities)}
        if item.found:
            text = self.reflection_prompt.render(**values, found="\n".join(f"- {f.text}" for f in item.found))
        else:
            text = self.prompt.render(**values)
        return self.request(text, json_schema=self.schema)

    def parse(self, text: str, item: FactIn) -> FactOut:
        rows = parse_json(text, facts_schema(10_000, 10_000))["facts"]
        known = {f.text.casefold() for f in item.found}
        facts: list[Fact] = []
        for row in rows:
            source, target = find_name(row["source"], item.entities), find_name(row["target"], item.entities)
            fact = one_line(row["fact"])[:self.max_fact_chars]
            if source is None or target is None or not fact or fact.casefold() in known:
                continue
            known.add(fact.casefold())
            facts.append(Fact(source, target, fact))
        return FactOut(tuple(facts[:self.max_facts]))

    def fallback(self, item: FactIn, error: str) -> FactOut:
        return FactOut(error=error)

    def forward(self, batch: list[FactIn]) -> list[FactOut]:
        outs = self.forward_where(batch, lambda item: bool(item.entities), lambda item: FactOut())
        return [self.resolve_dates(out, item) for out, item in zip(outs, batch)]

    def resolve_dates(self, out: FactOut, item: FactIn) -> FactOut:
        if self.normalizer is None or item.reference is None or not out.facts:
            return out
        found = self.normalizer([TemporalIn(f.text, item.reference) for f in out.facts])
        facts = tuple(replace(f, text=annotate(f.text, o.mentions), valid_at=o.mentions[0].start if len(o.mentions) == 1
                              else None) for f, o in zip(out.facts, found))
        return replace(out, facts=facts)
