"""Prompted event-argument extraction (EMem 3.2), several EDUs per call."""

from __future__ import annotations

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.lm.base import LM
from memlab.lm.errors import ParseError
from memlab.lm.jsonparse import list_schema, object_schema, parse_json
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.arguments.base import ArgumentExtractor, ArgumentIn, ArgumentOut, EventFrame, normalize_argument


def arguments_schema(n_edus: int | None = None, max_arguments: int | None = None) -> dict:
    """``{"events": [{id, event_type, arguments}]}``; the bounds are for the request (parsing is lenient)."""
    pair = object_schema({"role": {"type": "string"}, "argument": {"type": "string", "minLength": 1}})
    event = object_schema(
        {
            "id": {"type": "integer"},
            "event_type": {"type": "string"},
            "arguments": {"type": "array", "items": pair, **({"maxItems": max_arguments} if max_arguments else {})},
        }
    )
    schema = list_schema(event, key="events")
    if n_edus is not None:
        schema["properties"]["events"]["maxItems"] = n_edus
    return schema


class PromptedArgumentExtractor(PromptedStage, ArgumentExtractor):
    """One call per ``ArgumentIn`` (a batch of EDUs); prompt ``emem/arguments``.

    Entries are matched to EDUs by their ``id`` (1-based), falling back to position; an
    argument longer than ``max_argument_words`` words is not a node-worthy phrase and is
    dropped. EDUs the model skipped get an empty frame.

    ``grounded_only``: keep an argument only if it occurs in its EDU (case and spaces folded),
    as the prompt asks. On conv-26 the 1.5B model put the prompt's example arguments ("Tokyo",
    "March 2024") on 20 EDUs that never mention them, and gave EDUs arguments of their
    neighbours in the batch: 137 of 484 arguments were not in their EDU.
    """

    def __init__(
        self,
        lm: LM,
        prompt: str = "emem/arguments",
        max_arguments: PositiveInt = 6,
        max_argument_words: PositiveInt = 8,
        max_tokens: PositiveInt = 1024,
        temperature: NonNegativeFloat = 0.0,
        grounded_only: bool = True,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.prompt = load_prompt(prompt)
        self.max_arguments = max_arguments
        self.max_argument_words = max_argument_words
        self.grounded_only = grounded_only

    def render(self, item: ArgumentIn) -> ChatRequest:
        numbered = "\n".join(f"{i}. {text}" for i, text in enumerate(item.edus, start=1))
        return self.request(
            self.prompt.render(edus=numbered, max_arguments=self.max_arguments),
            json_schema=arguments_schema(len(item.edus), self.max_arguments),
        )

    def parse(self, text: str, item: ArgumentIn) -> ArgumentOut:
        events = parse_json(text, arguments_schema())["events"]
        frames: list[EventFrame | None] = [None] * len(item.edus)
        for position, event in enumerate(events):
            index = event.get("id", position + 1) - 1
            if not 0 <= index < len(item.edus) or frames[index] is not None:
                index = position
            if not 0 <= index < len(item.edus) or frames[index] is not None:
                continue
            pairs = []
            sentence = normalize_argument(item.edus[index])
            for pair in event.get("arguments", ())[: self.max_arguments]:
                argument = " ".join(pair["argument"].split())
                if not argument or len(argument.split()) > self.max_argument_words:
                    continue
                if self.grounded_only and normalize_argument(argument) not in sentence:
                    continue
                pairs.append((pair.get("role", "").strip() or "argument", argument))
            frames[index] = EventFrame(event.get("event_type", "").strip(), tuple(pairs))
        if item.edus and all(f is None for f in frames):
            raise ParseError("no event matched any of the given EDUs")
        return ArgumentOut(tuple(f or EventFrame("", ()) for f in frames))

    def fallback(self, item: ArgumentIn, error: str) -> ArgumentOut:
        return ArgumentOut(tuple(EventFrame("", ()) for _ in item.edus), error=error)
