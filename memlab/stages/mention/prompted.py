"""LLM mention detector (EMem-G 3.3); prompt ``emem/mentions``."""

from __future__ import annotations

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.lm.base import LM
from memlab.lm.jsonparse import list_schema, parse_json
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.mention.base import MentionDetector, MentionIn, MentionOut, dedupe


def mentions_schema(max_mentions: int | None = None) -> dict:
    """``{"mentions": [str, ...]}``; ``max_mentions`` bounds the request (parsing is lenient)."""
    schema = list_schema({"type": "string"}, key="mentions")
    if max_mentions is not None:
        schema["properties"]["mentions"]["maxItems"] = max_mentions
    return schema


class PromptedMentionDetector(PromptedStage, MentionDetector):
    """Asks the LLM for the question's mentions; its fallback is no mentions (no argument seeds)."""

    def __init__(
        self,
        lm: LM,
        prompt: str = "emem/mentions",
        max_mentions: PositiveInt = 6,
        max_tokens: PositiveInt = 96,
        temperature: NonNegativeFloat = 0.0,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.prompt = load_prompt(prompt)
        self.max_mentions = max_mentions

    def render(self, item: MentionIn) -> ChatRequest:
        return self.request(
            self.prompt.render(question=item.question, max_mentions=self.max_mentions),
            json_schema=mentions_schema(self.max_mentions),
        )

    def parse(self, text: str, item: MentionIn) -> MentionOut:
        return MentionOut(dedupe(parse_json(text, mentions_schema())["mentions"], self.max_mentions))

    def fallback(self, item: MentionIn, error: str) -> MentionOut:
        return MentionOut((), error=error)
