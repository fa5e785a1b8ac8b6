"""Prompted entity attributes (Mnemis 2.1; the prompt, ``mnemis/describe_entities``, is written
by memlab: the paper describes the step, not its prompt). One JSON-constrained call per
episode for all of its entities, where the paper's Graphiti base asks per entity."""

from __future__ import annotations

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.lm.base import LM
from memlab.lm.errors import RuleBrokenError
from memlab.lm.jsonparse import list_schema, parse_json
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.describe.base import (
    MAX_TAGS,
    DescribeIn,
    DescribeOut,
    EntityDescriber,
    EntityDescription,
    broken_rules,
    clip_tags,
    kept_descriptions,
    without_shared_summaries,
)
from memlab.stages.extraction import find_name, one_line


def describe_schema(max_summary_chars: int, max_tags: int = MAX_TAGS) -> dict:
    return list_schema({"type": "object", "properties": {
        "name": {"type": "string"},
        "summary": {"type": "string", "maxLength": max_summary_chars},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 40}, "maxItems": max_tags},
    }, "required": ["name", "summary", "tags"]}, key="entities")


def entities_text(item: DescribeIn) -> str:
    previous = item.previous or ("",) * len(item.names)
    return "\n".join(f"- {name}" + (f" (known so far: {summary})" if summary else "")
                     for name, summary in zip(item.names, previous))


class PromptedEntityDescriber(PromptedStage, EntityDescriber):
    """One call on ``prompt`` ({episode}, {entities}); the reply is matched to the names, and one
    that gives two names the same summary is refused and retried (the family's contract)."""

    def __init__(
        self,
        lm: LM,
        prompt: str = "mnemis/describe_entities",
        max_summary_chars: PositiveInt = 200,
        max_tokens: PositiveInt = 512,
        temperature: NonNegativeFloat = 0.0,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.prompt = load_prompt(prompt)
        self.max_summary_chars = max_summary_chars
        self.schema = describe_schema(max_summary_chars)

    def render(self, item: DescribeIn) -> ChatRequest:
        text = self.prompt.render(episode=item.episode, entities=entities_text(item))
        return self.request(text, json_schema=self.schema)

    def parse(self, text: str, item: DescribeIn) -> DescribeOut:
        rows = parse_json(text, describe_schema(10_000, 10_000))["entities"]
        by_name: dict[str, EntityDescription] = {}
        for row in rows:
            name = find_name(row["name"], item.names)
            summary = one_line(row["summary"])[:self.max_summary_chars]
            if name is not None and name not in by_name and summary:
                by_name[name] = EntityDescription(name, summary, clip_tags(row["tags"]))
        descriptions = tuple(by_name.get(d.name, d) for d in kept_descriptions(item))
        broken = broken_rules(tuple(by_name.values()))
        if broken:
            raise RuleBrokenError("; ".join(broken), salvage=DescribeOut(without_shared_summaries(item, descriptions)))
        return DescribeOut(descriptions)

    def fallback(self, item: DescribeIn, error: str) -> DescribeOut:
        return DescribeOut(kept_descriptions(item), error=error)

    def forward(self, batch: list[DescribeIn]) -> list[DescribeOut]:
        return self.forward_where(batch, lambda item: bool(item.names), lambda item: DescribeOut())
