"""Prompted router: one JSON-schema-constrained LLM call per question (prompt magma/route)."""

from __future__ import annotations

from dataclasses import replace

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.lm.base import LM
from memlab.lm.errors import ParseError
from memlab.lm.jsonparse import object_schema, parse_json
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.route.base import INTENTS, QUESTION_TYPES, IntentRouter, RouteIn, RouteOut, query_signals
from memlab.stages.temporal import TemporalNormalizer


class PromptedRouter(PromptedStage, IntentRouter):
    """Asks the LM for ``{"intent": ..., "question_type": ...}`` from closed label sets.

    The time window and keywords come from code (``query_signals`` with ``normalizer``), added
    to every output after the call. A reply that cannot be parsed falls back to
    ``default_intent`` / no question type (a counted failure).
    """

    def __init__(
        self,
        lm: LM,
        prompt: str = "magma/route",
        intents: list[str] | tuple[str, ...] = INTENTS,
        question_types: list[str] | tuple[str, ...] = QUESTION_TYPES,
        default_intent: str = "ENTITY",
        max_tokens: PositiveInt = 40,
        temperature: NonNegativeFloat = 0.0,
        normalizer: TemporalNormalizer | None = None,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.normalizer = normalizer
        self.prompt = load_prompt(prompt)
        self.intents = tuple(intents)
        self.question_types = tuple(question_types)
        if default_intent not in self.intents:
            raise ValueError(f"default_intent {default_intent!r} is not one of {self.intents}")
        self.default_intent = default_intent
        self.schema = object_schema(
            {"intent": {"type": "string", "enum": list(self.intents)},
             "question_type": {"type": "string", "enum": list(self.question_types)}},
            required=["intent", "question_type"],
        )

    def render(self, item: RouteIn) -> ChatRequest:
        return self.request(self.prompt.render(question=item.question), json_schema=self.schema)

    def parse(self, text: str, item: RouteIn) -> RouteOut:
        data = parse_json(text, self.schema)
        intent = str(data.get("intent", "")).strip().upper()
        if intent not in self.intents:
            raise ParseError(f"intent {data.get('intent')!r} is not one of {self.intents}")
        question_type = str(data.get("question_type", "")).strip().lower()
        return RouteOut(intent=intent, question_type=question_type if question_type in self.question_types else None)

    def fallback(self, item: RouteIn, error: str) -> RouteOut:
        return RouteOut(intent=self.default_intent, error=error)

    def forward(self, batch: list[RouteIn]) -> list[RouteOut]:
        outputs = PromptedStage.forward(self, batch)
        signals = [query_signals(item, self.normalizer) for item in batch]
        return [replace(out, time_window=window, keywords=keywords) for out, (window, keywords) in zip(outputs, signals)]
